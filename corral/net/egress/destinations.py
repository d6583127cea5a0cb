"""Which destinations the egress proxy may connect to (the SSRF table).

The check runs on the address the proxy actually connects to, after its own
resolution: a name that resolves to a public address at policy time and to
127.0.0.1 at connect time (DNS rebinding) is refused, because the refused address
is the one in hand when the socket is opened. Nothing is resolved twice.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import trio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: (network, why it is refused), checked in order; the first match names the reason.
#: The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are not in
#: it: contract §11 does not name them, they are not routed on the internet anyway, and
#: some networks put their package mirrors there (this build farm's deb.debian.org).
FORBIDDEN: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), reason)
    for cidr, reason in (
        ("169.254.169.254/32", "metadata"),
        ("169.254.170.2/32", "metadata"),
        ("fd00:ec2::254/128", "metadata"),
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "reserved"),
        ("198.18.0.0/15", "reserved"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "ipv4-mapped"),
        ("::/96", "ipv4-compatible"),
        ("64:ff9b::/96", "nat64"),
        ("64:ff9b:1::/48", "nat64"),
        ("2002::/16", "6to4"),
        ("2001::/32", "teredo"),
        ("2001:db8::/32", "reserved"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)


class DestinationRefused(Exception):
    """The destination is one instances may not reach through the proxy."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"{host} ({address}) is a {reason} address")
        self.host = host
        self.address = address
        self.reason = reason


class DestinationUnreachable(Exception):
    """The name did not resolve, or no address accepted the connection."""


def refusal_reason(address: str | IPAddress) -> str | None:
    """Why `address` is refused, or None for a public address."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return "link-local"
    for network, reason in FORBIDDEN:
        if ip.version == network.version and ip in network:
            return reason
    return None


@dataclass(frozen=True)
class DestinationPolicy:
    """Private destinations allowed (the operator's switch), or only some (tests' allow list)."""

    allow_private: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def build(cls, allow_private: bool, allowed: Iterable[str] = ()) -> DestinationPolicy:
        return cls(allow_private, tuple(ipaddress.ip_network(cidr, strict=False) for cidr in allowed))

    def check(self, host: str, address: str) -> None:
        """Raise `DestinationRefused` unless `address` may be connected to."""
        if self.allow_private:
            return
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip.version == net.version and ip in net for net in self.allowed_networks):
            return
        reason = refusal_reason(ip)
        if reason is not None:
            raise DestinationRefused(host, address, reason)


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[str]:
    """Every address of `host` (a literal is itself), IPv4 first."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DestinationUnreachable(f"cannot resolve {host}: {exc.strerror}") from exc
    addresses: list[str] = []
    for _family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    addresses.sort(key=lambda a: ":" in a)
    return addresses


async def checked_address(policy: DestinationPolicy, host: str, port: int) -> str:
    """The first address of `host` that passes the check, without connecting to it: a
    CONNECT is answered on this, and the connection is opened (to this address) only
    once the first request inside the tunnel was decided."""
    refused: DestinationRefused | None = None
    for candidate in await resolve(host, port):
        try:
            policy.check(host, candidate)
        except DestinationRefused as exc:
            refused = refused or exc
            continue
        return candidate
    raise refused or DestinationUnreachable(f"{host} has no address")


async def open_checked(
    policy: DestinationPolicy, host: str, port: int, *, address: str | None = None, timeout: float = 10.0
) -> tuple[trio.SocketStream, str]:
    """A TCP connection to `host` (or to the given `address`) whose peer passed the check.

    Each candidate address is checked, then connected to as it is; a refused one
    stops the attempt when no allowed one exists (the refusal is what the caller
    reports). Returns the stream and the address it reached.
    """
    candidates = [address] if address is not None else await resolve(host, port)
    refused: DestinationRefused | None = None
    failure: OSError | None = None
    for candidate in candidates:
        try:
            policy.check(host, candidate)
        except DestinationRefused as exc:
            refused = refused or exc
            continue
        family = socket.AF_INET6 if ":" in candidate else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            with trio.fail_after(timeout):
                await sock.connect((candidate, port))
        except (OSError, trio.TooSlowError) as exc:
            sock.close()
            failure = exc if isinstance(exc, OSError) else OSError(f"timed out after {timeout} s")
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return trio.SocketStream(sock), candidate
    if refused is not None and failure is None:
        raise refused
    raise DestinationUnreachable(f"cannot connect to {host}:{port}: {failure}")
