"""The node's DNS forwarder: what every instance's `/etc/resolv.conf` names.

It listens on the bridge address (UDP and TCP port 53), passes each query to the
upstream resolvers (`CORRAL_DNS_SERVERS`, else the system's) and returns their
answer unchanged. On the way it reads the answer's IPv4 addresses and hands them,
with the record's TTL, to `on_answer`, which puts them in the nftables sets of the
policies' hostname rules (contract §11: a hostname rule matches the addresses the
forwarder answered for it, for the record's TTL).

Why a forwarder of our own rather than dnsmasq with `nftset`: dnsmasq's sets are
fixed in its configuration, so every policy change would restart it (its `SIGHUP`
does not re-read `nftset`); it gives elements no per-record timeout; and it knows
nothing of per-instance chains. This one is a hundred lines over dnspython (already
a dependency) and a trio socket, and policies change it by updating a dict.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset
import trio

log = logging.getLogger("corral.net.dns")

UPSTREAM_TIMEOUT = 2.0
MAX_PENDING = 512
"""Queries answered at once; more are dropped (the client asks again), so a flood from
one instance cannot grow the forwarder without bound."""
MIN_TTL = 5
"""Addresses stay in a set at least this long, so that the connection that follows
the lookup can start even for a record with TTL 0."""

Answer = Callable[[str, list[tuple[str, int]]], Awaitable[None]]


def parse_upstream(value: str) -> tuple[str, int]:
    """`host` or `host:port` (IPv4) as an address pair."""
    host, _, port = value.strip().partition(":")
    return host, int(port) if port else 53


def system_resolvers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """Every IPv4 resolver of the host (the forwarder runs on the host: loopback ones work)."""
    servers = []
    try:
        for line in Path(resolv_conf).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver" and "." in parts[1]:
                servers.append(parts[1])
    except OSError:
        pass
    return servers


def upstream_servers(configured: Sequence[str] = ()) -> tuple[str, ...]:
    """Where the node's names are asked: `CORRAL_DNS_SERVERS` when given, else the system's
    resolvers. The forwarder (for instances) and the egress proxy (for the names instances
    ask it to reach) both ask these, so a name means the same address to both."""
    given = tuple(server.strip() for server in configured if server.strip())
    return given or tuple(system_resolvers())


def answered_addresses(
    response: dns.message.Message, rdtype: dns.rdatatype.RdataType = dns.rdatatype.A
) -> tuple[str, list[tuple[str, int]]]:
    """(question name, [(address, TTL)]) of an answer (IPv4, or the `rdtype` asked), CNAME chains followed."""
    if not response.question:
        return "", []
    qname = response.question[0].name
    names = {qname}
    addresses: list[tuple[str, int]] = []
    for rrset in response.answer:  # a CNAME chain comes in order
        if rrset.name not in names:
            continue
        if rrset.rdtype == dns.rdatatype.CNAME:
            names.update(rdata.target for rdata in rrset)
        elif rrset.rdtype == rdtype:
            addresses += [(rdata.address, max(MIN_TTL, rrset.ttl)) for rdata in rrset]
    return qname.to_text(omit_final_dot=True).lower(), addresses


class LookupFailed(Exception):
    """A name has no address: the upstreams said so (NXDOMAIN, no record), or none answered."""


LOCAL_TTL = 60


class DnsForwarder:
    def __init__(
        self, listen: str, upstreams: Sequence[str], on_answer: Answer, port: int = 53, local_names: Mapping[str, str] | None = None
    ) -> None:
        self.listen = listen
        self.port = port
        self.upstreams = [parse_upstream(u) for u in upstreams if u.strip()]
        self.on_answer = on_answer
        self.local_names = {dns.name.from_text(name): address for name, address in (local_names or {}).items()}
        """Names the forwarder answers itself, never asking upstream: each name's one IPv4
        address on this node (the database host instances reach, `corral.net.network`)."""
        self._nursery: trio.Nursery | None = None
        self._pending = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer queries until cancelled; ready once both sockets are bound."""
        udp = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        tcp = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        with udp, tcp:
            tcp.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            await udp.bind((self.listen, self.port))
            await tcp.bind((self.listen, self.port))
            tcp.listen(64)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._serve_udp, udp, nursery)
                nursery.start_soon(self._serve_tcp, tcp, nursery)
                task_status.started()

    async def _serve_udp(self, sock: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        while True:
            try:
                data, peer = await sock.recvfrom(65535)
            except OSError as exc:  # a transient error of the socket: go on serving
                log.warning("DNS forwarder: %s", exc)
                continue
            if self._pending < MAX_PENDING:
                self._pending += 1
                nursery.start_soon(self._answer_udp, sock, data, peer)

    async def _answer_udp(self, sock: trio.socket.SocketType, data: bytes, peer: tuple[str, int]) -> None:
        try:
            reply = await self.resolve(data)
            if reply is not None:
                await sock.sendto(reply, peer)
        except Exception:  # one query's failure never stops the forwarder (nor the node)
            log.exception("DNS forwarder: a query failed")
        finally:
            self._pending -= 1

    async def _serve_tcp(self, sock: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        while True:
            try:
                conn, _ = await sock.accept()
            except OSError as exc:
                log.warning("DNS forwarder: %s", exc)
                await trio.sleep(0.1)
                continue
            if self._pending < MAX_PENDING:
                self._pending += 1
                nursery.start_soon(self._answer_tcp, trio.SocketStream(conn))
            else:
                conn.close()

    async def _answer_tcp(self, stream: trio.SocketStream) -> None:
        try:
            await self._converse(stream)
        except Exception:
            log.exception("DNS forwarder: a TCP query failed")
        finally:
            self._pending -= 1

    async def _converse(self, stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(10):
                try:
                    while True:
                        query = await _read_framed(stream)
                        if query is None:
                            return
                        reply = await self.resolve(query, tcp=True)
                        if reply is None:
                            return
                        await stream.send_all(struct.pack("!H", len(reply)) + reply)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return

    async def resolve(self, query: bytes, *, tcp: bool = False) -> bytes | None:
        """The upstreams' answer to `query` (the first that answers), after its
        addresses went to `on_answer`; SERVFAIL when none answers."""
        try:
            parsed = dns.message.from_wire(query)
        except Exception:  # not DNS: no answer
            return None
        local = self._local_answer(parsed)
        if local is not None:
            return local
        for upstream in self.upstreams:
            try:
                with trio.fail_after(UPSTREAM_TIMEOUT):
                    # UDP first whichever way the instance asked; a truncated answer goes
                    # back as it is to a UDP client (which asks again over TCP), and is
                    # asked again over TCP for a TCP client.
                    reply = await _ask_udp(upstream, query)
                    response = dns.message.from_wire(reply)
                    if response.flags & dns.flags.TC and tcp:
                        reply = await _ask_tcp(upstream, query)
                        response = dns.message.from_wire(reply)
            except (trio.TooSlowError, OSError, trio.BrokenResourceError, dns.exception.DNSException):
                continue
            if response.id != parsed.id:
                continue
            name, addresses = answered_addresses(response)
            if addresses:
                try:
                    await self.on_answer(name, addresses)
                except Exception:  # the answer still goes to the instance
                    log.exception("could not record the addresses of %s", name)
            return reply
        failure = dns.message.make_response(parsed)
        failure.set_rcode(dns.rcode.SERVFAIL)
        return bytes(failure.to_wire())

    def _local_answer(self, parsed: dns.message.Message) -> bytes | None:
        """This node's own answer for a local name (its address for A, no record for any
        other type), or None for every other name."""
        if not self.local_names or len(parsed.question) != 1:
            return None
        question = parsed.question[0]
        address = self.local_names.get(question.name)
        if address is None:
            return None
        response = dns.message.make_response(parsed)
        response.flags |= dns.flags.AA
        if question.rdtype == dns.rdatatype.A:
            response.answer.append(dns.rrset.from_text(question.name, LOCAL_TTL, "IN", "A", address))
        return bytes(response.to_wire())

    async def addresses(self, hostname: str) -> list[str]:
        """The addresses of `hostname` exactly as an instance asking the forwarder gets them
        (the same upstreams, the same answer, which goes to `on_answer` on the way): its
        IPv4 addresses, else its IPv6 ones. `LookupFailed` when it has none."""
        found: list[str] = []
        reason = "no address"
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            try:
                query = dns.message.make_query(hostname, rdtype)
            except (dns.exception.DNSException, ValueError) as exc:
                raise LookupFailed(f"{hostname} is not a valid name: {exc}") from exc
            reply = await self.resolve(query.to_wire(), tcp=True)
            if reply is None:  # cannot happen for a query made here
                continue
            try:
                response = dns.message.from_wire(reply)
            except dns.exception.DNSException as exc:
                raise LookupFailed(f"cannot resolve {hostname}: {exc}") from exc
            rcode = response.rcode()
            if rcode == dns.rcode.NXDOMAIN:
                raise LookupFailed(f"cannot resolve {hostname}: no such name")
            if rcode != dns.rcode.NOERROR:
                reason = "the name servers did not answer" if rcode == dns.rcode.SERVFAIL else dns.rcode.to_text(rcode)
                continue
            found = [address for address, _ttl in answered_addresses(response, rdtype)[1]]
            if found:
                return list(dict.fromkeys(found))
        raise LookupFailed(f"cannot resolve {hostname}: {reason}")

    async def lookup(self, hostname: str) -> None:
        """Resolve `hostname` now, so that its set is filled before an instance asks
        (a policy naming a host that an instance already has in mind)."""
        try:
            query = dns.message.make_query(hostname, dns.rdatatype.A)
            await self.resolve(query.to_wire())
        except Exception:  # a background lookup: the instance's own query tries again
            log.exception("DNS forwarder: could not look %s up", hostname)

    def prefetch(self, hostnames: Sequence[str]) -> None:
        """`lookup` each hostname in the background (nothing while not serving)."""
        if self._nursery is None:
            return
        for hostname in hostnames:
            self._nursery.start_soon(self.lookup, hostname)


async def _ask_udp(upstream: tuple[str, int], query: bytes) -> bytes:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        await sock.connect(upstream)
        await sock.send(query)
        return bytes(await sock.recv(65535))


async def _ask_tcp(upstream: tuple[str, int], query: bytes) -> bytes:
    stream = await trio.open_tcp_stream(*upstream)
    async with stream:
        await stream.send_all(struct.pack("!H", len(query)) + query)
        reply = await _read_framed(stream)
        if reply is None:
            raise trio.BrokenResourceError("upstream closed")
        return reply


async def _read_framed(stream: trio.SocketStream) -> bytes | None:
    """One length-prefixed DNS message of a TCP stream; None at its end."""
    buffer = b""
    while len(buffer) < 2:
        chunk = await stream.receive_some(2 - len(buffer))
        if not chunk:
            return None
        buffer += chunk
    (length,) = struct.unpack("!H", buffer)
    data = b""
    while len(data) < length:
        chunk = await stream.receive_some(length - len(data))
        if not chunk:
            return None
        data += chunk
    return data
