"""The egress proxy: every HTTP(S) request an instance makes, in one place.

One listener on the bridge address takes both ways in:

- explicit: programs that honour `HTTP_PROXY`/`HTTPS_PROXY` send absolute-form
  requests (`GET http://host/...`) or `CONNECT host:443`;
- transparent: nftables redirects every other connection of an instance to ports
  80 and 443 here (`redirect.py`); `SO_ORIGINAL_DST` says where it was going.

TLS (after a CONNECT, or a redirected connection whose first byte is a TLS
handshake) is terminated with a leaf certificate for the host the instance named
(the CONNECT target or the TLS SNI), minted from the node's egress CA; the
upstream is verified against the system CAs plus `CORRAL_CA_BUNDLE`. HTTP on both
sides is parsed by h11. Each request is asked of the hooks (decide, transform
headers, scrub the response, record), so policy, secrets and audit stay in the
actors layer. The destination check (`destinations.py`) runs on the address the
proxy connects to, found as the instance would find it: a name the instance gives
(a CONNECT target, an absolute URL) is resolved by `resolver`, the node's DNS
forwarder (`corral.node` hands it over), never by the host's own resolver; and it
is resolved and checked before the hooks decide, so they judge the address that
will be connected to.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import socket as stdlib_socket
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

import h11
import trio

from corral.ids import new_ulid

from ..dns_forwarder import DnsForwarder, upstream_servers
from .ca import EgressCA
from .destinations import (
    DestinationPolicy,
    DestinationRefused,
    DestinationUnreachable,
    Resolver,
    checked_address,
    open_checked,
)
from .hooks import (
    AllowAll,
    AuditEntry,
    Decision,
    EgressHooks,
    Headers,
    Rejected,
    RequestInfo,
    ResponseScrubber,
    Transform,
)
from .streams import (
    READ_SIZE,
    Peer,
    Prefixed,
    keeps_alive,
    looks_closed,
    original_destination,
    plain_socket,
    splice,
    split_host_port,
)
from .tls import TLSStream

log = logging.getLogger("corral.net.egress")

TLS_HANDSHAKE = 0x16
REQUEST_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate", b"te",
    b"trailer", b"upgrade",
})
RESPONSE_HOP_BY_HOP = REQUEST_HOP_BY_HOP | {b"transfer-encoding"}
DEFAULT_PORTS = {"http": 80, "https": 443}
SPLICE_BYTES = 262144
"""A plain body with this much still to come is spliced (below it, a pipe's setup costs
more than copying)."""
_SNI: contextvars.ContextVar[str | None] = contextvars.ContextVar("corral_egress_sni", default=None)


def _reason(status: int) -> bytes:
    """The reason phrase of a status line the proxy writes (h11 writes none unless given
    one): every answer reads the same to strict clients as to lenient ones."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


@dataclass(frozen=True)
class EgressProxyConfig:
    listen_host: str
    port: int
    destinations: DestinationPolicy = field(default_factory=DestinationPolicy)
    ca_bundle: str | None = None
    """Extra CAs trusted for upstreams (`CORRAL_CA_BUNDLE`), beside the system's."""
    dns_servers: tuple[str, ...] = ()
    """The name servers the node's DNS forwarder asks (`CORRAL_DNS_SERVERS`; empty: the
    system's): until the node hands over the forwarder itself, names are asked of them."""
    connect_timeout: float = 10.0
    handshake_timeout: float = 10.0
    idle_timeout: float = 75.0
    platform_upstream: tuple[str, int] | None = None
    """The node's own API (host, port): where `platform_paths` asked of the proxy itself go."""
    platform_paths: tuple[str, ...] = ()
    """Paths an instance may ask of the proxy directly (`GET /path`, not a proxy request),
    forwarded to `platform_upstream` without policy: the platform's own endpoints for
    instances (an agent run's usage report), reachable because the proxy is the one
    host address instances may connect to."""


PLATFORM_MODE = "platform"


class ProxyFailure(Exception):
    """A request the proxy answers itself (status, API error code, message)."""

    def __init__(self, status: int, code: str, message: str, rejected_by: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.rejected_by = rejected_by


@dataclass
class _Target:
    """Where a tunnel or a redirected connection goes: fixed for the connection's life."""

    scheme: str
    host: str
    port: int
    address: str | None
    mode: str


class _Upstream:
    __slots__ = ("address", "key", "peer", "raw")

    def __init__(self, key: tuple[str, str, int, str | None], peer: Peer, raw: trio.SocketStream, address: str) -> None:
        self.key = key
        self.peer = peer
        self.raw = raw
        self.address = address


async def _ignore_answer(name: str, addresses: list[tuple[str, int]]) -> None:
    return None


def _forwarder_resolver(dns_servers: Sequence[str]) -> Resolver | None:
    """A resolver asking what the node's DNS forwarder asks, the same way (None: no name server)."""
    upstreams = upstream_servers(dns_servers)
    return DnsForwarder("", upstreams, _ignore_answer).addresses if upstreams else None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _strip(headers: Sequence[tuple[bytes, bytes]], hop_by_hop: frozenset[bytes]) -> Headers:
    listed = {token.strip().lower() for key, value in headers if key.lower() == b"connection" for token in value.split(b",")}
    return [(key, value) for key, value in headers if key.lower() not in hop_by_hop and key.lower() not in listed]


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    value = _header(headers, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _error_body(code: str, message: str, request_id: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "request_id": request_id}}).encode()


class EgressProxy:
    def __init__(self, config: EgressProxyConfig, ca: EgressCA, hooks: EgressHooks | None = None) -> None:
        self.config = config
        self.ca = ca
        self.hooks: EgressHooks = hooks or AllowAll()
        self.upstream_tls = ssl.create_default_context()
        if config.ca_bundle:
            try:
                self.upstream_tls.load_verify_locations(cafile=config.ca_bundle)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"CORRAL_CA_BUNDLE {config.ca_bundle} cannot be read: {exc}") from exc
        self.upstream_tls.set_alpn_protocols(["http/1.1"])
        self.resolver: Resolver | None = _forwarder_resolver(config.dns_servers)
        """How names become addresses: as the node's DNS forwarder answers them (None: no
        name server is known at all, the system's resolver then)."""
        self.bound_port: int | None = None
        self.connections = 0
        self.decisions: Counter[str] = Counter()
        """Requests by outcome (`allowed`, `denied`, `failed`: refused by the proxy or its
        upstream): plain counters the node's metrics read."""
        self.on_overhead: Callable[[float], None] | None = None
        """Given the proxy's own time before forwarding an allowed request (resolving,
        checking, deciding, rewriting headers; not the upstream's connect): the latency
        the proxy adds. None: not measured."""

    # -- listening ------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; `task_status.started(port)` once listening."""
        host = self.config.listen_host
        family = stdlib_socket.AF_INET6 if ":" in host else stdlib_socket.AF_INET
        listener = trio.socket.socket(family, stdlib_socket.SOCK_STREAM)
        listener.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
        # The bridge address may not exist yet when the node starts (it comes with the
        # first instance): bind to it regardless.
        listener.setsockopt(stdlib_socket.SOL_IP, 15, 1)  # IP_FREEBIND
        try:
            await listener.bind((host, self.config.port))
            listener.listen(1024)
            self.bound_port = int(listener.getsockname()[1])
            task_status.started(self.bound_port)
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        sock, address = await listener.accept()
                    except OSError as exc:
                        log.warning("egress proxy accept failed: %s", exc)
                        await trio.sleep(0.1)
                        continue
                    sock.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
                    nursery.start_soon(self._connection, sock, str(address[0]))
        finally:
            listener.close()

    async def _connection(self, sock: trio.socket.SocketType, peer: str) -> None:
        self.connections += 1
        stream = trio.SocketStream(sock)
        try:
            original = original_destination(sock)
            if original is None:
                await self._serve_http(Peer(stream, h11.SERVER), peer, None)
            else:
                await self._transparent(stream, peer, original)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, ssl.SSLError, OSError) as exc:
            log.debug("egress connection from %s ended: %r", peer, exc)
        except trio.TooSlowError:
            log.debug("egress connection from %s timed out", peer)
        finally:
            self.connections -= 1
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    # -- ways in --------------------------------------------------------------

    async def _transparent(self, stream: trio.SocketStream, peer: str, original: tuple[str, int]) -> None:
        address, port = original
        with trio.fail_after(self.config.handshake_timeout):
            first = await stream.receive_some(16384)
        if not first:
            return
        client: trio.abc.Stream = Prefixed(stream, bytes(first))
        if first[0] == TLS_HANDSHAKE:
            tls, sni = await self._terminate_tls(client, address)
            target = _Target("https", sni or address, port, address, "transparent")
            await self._serve_http(Peer(tls, h11.SERVER), peer, target)
        else:
            target = _Target("http", "", port, address, "transparent")
            await self._serve_http(Peer(client, h11.SERVER), peer, target)

    async def _terminate_tls(self, client: trio.abc.Stream, fallback_host: str) -> tuple[TLSStream, str | None]:
        """The TLS server side towards the instance; the leaf follows the SNI (else `fallback_host`)."""
        context = self.ca.context_for(fallback_host)
        context.sni_callback = self._on_sni
        _SNI.set(None)
        tls = TLSStream(client, context, server_side=True)
        with trio.fail_after(self.config.handshake_timeout):
            await tls.do_handshake()
        return tls, _SNI.get()

    def _on_sni(self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, context: ssl.SSLContext) -> None:
        if server_name:
            _SNI.set(server_name.lower())
            leaf = self.ca.context_for(server_name)
            leaf.sni_callback = self._on_sni
            sslobj.context = leaf

    async def _connect_tunnel(self, client: Peer, peer: str, request: h11.Request) -> None:
        """CONNECT host:port: check the destination (or refuse), answer 200, then serve the
        tunnel. The upstream connection opens only after the hooks decided the first
        request inside it, so a host the policy refuses never sees a packet."""
        request_id = new_ulid()
        started = time.monotonic()
        target_text = request.target.decode("latin-1")
        info = RequestInfo(request_id, peer, "CONNECT", "https", target_text, 0, "", "explicit")
        try:
            try:
                host, port = split_host_port(target_text, 443, port_required=True)
            except ValueError as exc:
                raise ProxyFailure(400, "INVALID_REQUEST", str(exc)) from exc
            info = RequestInfo(request_id, peer, "CONNECT", "https", host, port, "", "explicit")
            address = await self._check(host, port)
        except ProxyFailure as failure:
            await self._refuse(client, info, failure, started, Decision())  # a refusal, or an error
            return
        await client.send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
        leftover, _ = client.conn.trailing_data
        inner: trio.abc.Stream = client.stream
        first = bytes(leftover)
        if not first:
            with trio.move_on_after(self.config.idle_timeout):
                first = bytes(await inner.receive_some(16384))
        if not first:
            return
        wrapped = Prefixed(inner, first)
        if first[0] == TLS_HANDSHAKE:
            tls, _sni = await self._terminate_tls(wrapped, host)
            await self._serve_http(Peer(tls, h11.SERVER), peer, _Target("https", host, port, address, "explicit"))
        else:
            await self._serve_http(Peer(wrapped, h11.SERVER), peer, _Target("http", host, port, address, "explicit"))

    # -- requests -------------------------------------------------------------

    async def _serve_http(self, client: Peer, peer: str, target: _Target | None) -> None:
        upstream: _Upstream | None = None
        try:
            with trio.CancelScope() as idle:
                while True:
                    idle.deadline = trio.current_time() + self.config.idle_timeout
                    event = await client.next_event()
                    idle.deadline = math.inf
                    if not isinstance(event, h11.Request):
                        return  # closed, or garbage h11 reported as an event
                    if event.method == b"CONNECT" and target is None:
                        await self._connect_tunnel(client, peer, event)
                        return
                    upstream = await self._exchange(client, peer, target, event, upstream)
                    if not client.reusable():
                        return
                    client.next_cycle()
        finally:
            if upstream is not None:
                await upstream.peer.aclose()

    def _where(self, target: _Target | None, request: h11.Request) -> tuple[str, str, int, str, str | None, str]:
        """(scheme, host, port, origin-form path, address to connect to, mode) of a request."""
        raw_target = request.target.decode("latin-1")
        host_header = (_header(request.headers, b"host") or b"").decode("latin-1")
        if target is not None:
            path = raw_target if raw_target.startswith("/") or raw_target == "*" else self._origin_form(raw_target)
            host = target.host
            if not host:  # transparent plain HTTP: the Host header names it
                host = split_host_port(host_header, target.port)[0] if host_header else str(target.address)
            return target.scheme, host, target.port, path, target.address, target.mode
        if raw_target.startswith("/"):
            return self._where_platform(raw_target)
        url = urlsplit(raw_target)
        if url.scheme not in DEFAULT_PORTS or not url.netloc:
            raise ProxyFailure(400, "INVALID_REQUEST", f"cannot proxy {raw_target!r}")
        try:
            host, port = split_host_port(url.netloc.rpartition("@")[2], DEFAULT_PORTS[url.scheme])
        except ValueError as exc:
            raise ProxyFailure(400, "INVALID_REQUEST", str(exc)) from exc
        path = self._origin_form(raw_target)
        if url.scheme == "http" and (host, port) == (self.config.listen_host, self.config.port):
            return self._where_platform(path)  # the proxy itself, named as a proxy target
        return url.scheme, host, port, path, None, "explicit"

    def _where_platform(self, path: str) -> tuple[str, str, int, str, str | None, str]:
        """A request for the proxy itself: a platform path goes to the node's API."""
        platform = self.config.platform_upstream
        if platform is None or path.split("?", 1)[0] not in self.config.platform_paths:
            raise ProxyFailure(400, "INVALID_REQUEST", "a proxy request needs an absolute URL (http://host/path)")
        return "http", platform[0], platform[1], path, platform[0], PLATFORM_MODE

    @staticmethod
    def _origin_form(url: str) -> str:
        parts = urlsplit(url)
        path = parts.path or "/"
        return f"{path}?{parts.query}" if parts.query else path

    async def _exchange(
        self, client: Peer, peer: str, target: _Target | None, request: h11.Request, upstream: _Upstream | None
    ) -> _Upstream | None:
        """One request: decide, connect, relay both ways, record. Returns the upstream kept alive."""
        request_id = new_ulid()
        started = time.monotonic()
        method = request.method.decode("latin-1")
        info = RequestInfo(request_id, peer, method, "http", "", 0, request.target.decode("latin-1"), "explicit")
        decision = Decision()
        transforms: Sequence[Transform] = ()
        try:
            scheme, host, port, path, address, mode = self._where(target, request)
            platform = mode == PLATFORM_MODE
            if address is None and not platform:  # an absolute URL: its name, resolved and checked now
                info = RequestInfo(request_id, peer, method, scheme, host, port, path, mode)
                address = await self._check(host, port)
            info = RequestInfo(request_id, peer, method, scheme, host, port, path, mode, address)
            decision = Decision() if platform else await self.hooks.decide(info)
            if not decision.allow:
                raise ProxyFailure(decision.status, "EGRESS_DENIED", decision.message, decision.rejected_by)
            headers = _strip(request.headers, REQUEST_HOP_BY_HOP)
            if _header(headers, b"host") is None:
                default = DEFAULT_PORTS[scheme]
                headers.insert(0, (b"host", (host if port == default else f"{host}:{port}").encode()))
            try:
                if not platform:
                    headers, transforms = await self.hooks.transform_headers(info, headers)
            except Rejected as rejected:
                decision = rejected.decision
                raise ProxyFailure(decision.status, "EGRESS_DENIED", decision.message, decision.rejected_by) from None
            if self.on_overhead is not None:
                self.on_overhead(time.monotonic() - started)
            upstream = await self._upstream_for(upstream, scheme, host, port, address, platform=platform)
            upstream_request = h11.Request(method=request.method, target=path.encode("latin-1"), headers=headers)
        except ProxyFailure as failure:
            if upstream is not None:
                await upstream.peer.aclose()
            await self._drain(client)
            await self._refuse(client, info, failure, started, decision, transforms)
            return None
        sent, received, status = 0, 0, None
        error: str | None = None
        try:
            await upstream.peer.send(upstream_request)
            sent = await self._relay_request_body(client, upstream.peer)
            response = await upstream.peer.next_event()
            while isinstance(response, h11.InformationalResponse):
                response = await upstream.peer.next_event()
            if not isinstance(response, h11.Response):
                raise ProxyFailure(502, "UPSTREAM_ERROR", f"{host} closed the connection without answering")
        except (ProxyFailure, h11.ProtocolError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            await upstream.peer.aclose()
            answer = exc if isinstance(exc, ProxyFailure) else ProxyFailure(502, "UPSTREAM_ERROR", f"{host}: {exc!r}")
            await self._refuse(client, info, answer, started, decision, transforms)
            return None
        status = response.status_code
        response_headers, scrubber = self.hooks.scrub_response(info, _strip(response.headers, RESPONSE_HOP_BY_HOP))
        if scrubber is not None:
            response_headers = [(k, v) for k, v in response_headers if k.lower() != b"content-length"]
        length = _content_length(response_headers)
        raw = (  # a body of known length the proxy leaves as is: relayed past h11
            scrubber is None and length is not None and method != "HEAD" and status >= 200 and status not in (204, 304)
            and _header(response.headers, b"transfer-encoding") is None
        )
        try:
            await client.send(h11.Response(status_code=status, headers=response_headers, reason=response.reason or _reason(status)))
            if raw and length is not None:
                received = await self._relay_raw(upstream.peer, client, length, keeps_alive(response))
                await client.send(h11.EndOfMessage())
            else:
                received = await self._relay_response_body(upstream.peer, client, scrubber)
        except (h11.ProtocolError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            error = f"relay failed: {exc!r}"
            await upstream.peer.aclose()
            upstream = None
            raise
        finally:
            await self._record(info, decision, status, upstream, sent, received, started, transforms, error)
        if upstream.peer.reusable():
            upstream.peer.next_cycle()
            return upstream
        await upstream.peer.aclose()
        return None

    async def _upstream_for(
        self, current: _Upstream | None, scheme: str, host: str, port: int, address: str | None,
        *, platform: bool = False,
    ) -> _Upstream:
        key = (scheme if not platform else PLATFORM_MODE, host, port, address)
        if current is not None:
            kept = current.peer.stream
            # Bytes past the last response (in h11, in TLS, in the socket): unusable too.
            leftover = len(current.peer.conn.trailing_data[0]) + (kept.buffered if isinstance(kept, TLSStream) else 0)
            if current.key == key and not leftover and not looks_closed(current.raw.socket):
                return current
            await current.peer.aclose()
        if platform:  # the node's own API on loopback: no destination check applies
            try:
                raw, connected = await trio.open_tcp_stream(host, port), host
            except OSError as exc:
                raise ProxyFailure(502, "UPSTREAM_UNREACHABLE", f"the platform API is unreachable: {exc}") from exc
        else:
            raw, connected = await self._open(host, port, address)
        stream: trio.abc.Stream = raw
        if scheme == "https":
            tls = TLSStream(raw, self.upstream_tls, server_side=False, server_hostname=host)
            try:
                with trio.fail_after(self.config.handshake_timeout):
                    await tls.do_handshake()
            except (ssl.SSLError, trio.BrokenResourceError, trio.TooSlowError, OSError) as exc:
                await raw.aclose()
                cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
                reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or repr(cause)
                if isinstance(cause, ssl.SSLCertVerificationError):
                    reason = f"certificate verify failed: {reason}"
                raise ProxyFailure(502, "UPSTREAM_TLS_ERROR", f"TLS with {host} failed: {reason}", "upstream_tls") from exc
            stream = tls
        return _Upstream(key, Peer(stream, h11.CLIENT), raw, connected)

    async def _check(self, host: str, port: int) -> str:
        try:
            return await checked_address(self.config.destinations, host, port, self.resolver)
        except DestinationRefused as exc:
            raise ProxyFailure(403, "EGRESS_DENIED", f"destination refused: {exc}", "destination") from exc
        except DestinationUnreachable as exc:
            raise ProxyFailure(502, "UPSTREAM_UNREACHABLE", str(exc)) from exc

    async def _open(self, host: str, port: int, address: str | None) -> tuple[trio.SocketStream, str]:
        try:
            return await open_checked(
                self.config.destinations, host, port, address=address, timeout=self.config.connect_timeout,
                resolver=self.resolver,
            )
        except DestinationRefused as exc:
            raise ProxyFailure(403, "EGRESS_DENIED", f"destination refused: {exc}", "destination") from exc
        except DestinationUnreachable as exc:
            raise ProxyFailure(502, "UPSTREAM_UNREACHABLE", str(exc)) from exc

    # -- bodies, answers, records ---------------------------------------------

    @staticmethod
    async def _relay_request_body(client: Peer, upstream: Peer) -> int:
        count = 0
        if client.conn.client_is_waiting_for_100_continue:
            # The body comes only once asked for: ask at once (the upstream's own 100 is skipped).
            await client.send(h11.InformationalResponse(status_code=100, headers=[], reason=_reason(100)))
        while True:
            event = await client.next_event()
            if isinstance(event, h11.Data):
                count += len(event.data)
                await upstream.send(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await upstream.send(h11.EndOfMessage())
                return count
            else:
                raise trio.BrokenResourceError("the instance closed the request")

    @staticmethod
    async def _relay_response_body(upstream: Peer, client: Peer, scrubber: ResponseScrubber | None) -> int:
        """A body h11 parses (chunked, read to the close, or one a scrubber rewrites). h11
        gives one event per upstream chunk: what one read brought goes on as one piece
        (one chunk, one TLS write, one send) rather than as many small ones."""
        count = 0
        event = await upstream.next_event()
        while True:
            if isinstance(event, h11.Data):
                pieces = [event.data]
                event = upstream.conn.next_event()  # what h11 holds already: no wait
                while isinstance(event, h11.Data):
                    pieces.append(event.data)
                    event = upstream.conn.next_event()
                body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                count += len(body)
                data = scrubber.feed(bytes(body)) if scrubber is not None else body
                if data:
                    await client.send(h11.Data(data=data))
                if event is h11.NEED_DATA:
                    event = await upstream.next_event()
            elif isinstance(event, h11.EndOfMessage):
                if scrubber is not None:
                    tail = scrubber.finish()
                    if tail:
                        await client.send(h11.Data(data=tail))
                await client.send(h11.EndOfMessage())
                return count
            else:
                raise trio.BrokenResourceError("the upstream closed the response")

    @staticmethod
    async def _relay_raw(upstream: Peer, client: Peer, length: int, keep_alive: bool) -> int:
        """A Content-Length body past h11: what it already holds, then straight from the
        upstream (spliced in the kernel when neither side is TLS) in big reads. The body's
        end is known from its length, so parsing would add nothing but copies; h11 still
        counts what is sent, and the upstream's starts afresh afterwards (`skipped_body`)."""
        count = 0
        while count < length:
            event = upstream.conn.next_event()
            if not isinstance(event, h11.Data):
                break  # NEED_DATA: the rest is still to come
            count += len(event.data)
            await client.send_body(event.data)
        if count >= length:  # all of it was in h11's buffer: h11 saw the whole message
            upstream.conn.next_event()  # its EndOfMessage
            return count
        source, sink = plain_socket(upstream.stream), plain_socket(client.stream)
        if source is not None and sink is not None and length - count >= SPLICE_BYTES:  # plain HTTP both ways: in the kernel
            moved = await splice(source, sink, length - count)
            client.sent_past(moved)
            count += moved
            if count < length:
                raise trio.BrokenResourceError("the upstream closed the response")
        if isinstance(upstream.stream, TLSStream) and count < length:
            # Decrypted into one buffer for the whole body, encrypted again straight from it.
            buffer = memoryview(bytearray(min(READ_SIZE, length - count)))
            while count < length:
                got = await upstream.stream.receive_into(buffer[: length - count])
                if not got:
                    raise trio.BrokenResourceError("the upstream closed the response")
                count += got
                await client.send_body(buffer[:got])
        while count < length:
            data = await upstream.stream.receive_some(min(READ_SIZE, length - count))
            if not data:
                raise trio.BrokenResourceError("the upstream closed the response")
            count += len(data)
            await client.send_body(data)
        upstream.skipped_body(keep_alive)
        return count

    @staticmethod
    async def _drain(client: Peer) -> None:
        """Read (and drop) the rest of a refused request's body, so the connection stays usable."""
        with trio.move_on_after(5):
            while client.conn.their_state is h11.SEND_BODY:
                event = await client.next_event()
                if not isinstance(event, h11.Data | h11.EndOfMessage):
                    return

    async def _refuse(
        self,
        client: Peer,
        info: RequestInfo,
        failure: ProxyFailure,
        started: float,
        decision: Decision,
        transforms: Sequence[Transform] = (),
    ) -> None:
        """Answer the instance with the proxy's own error, and record it."""
        if failure.rejected_by and decision.allow:
            decision = Decision(allow=False, rejected_by=failure.rejected_by, message=failure.message, status=failure.status)
        body = _error_body(failure.code, failure.message, info.request_id)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if client.conn.their_state is not h11.DONE:
            headers.append((b"connection", b"close"))
        await self._record(info, decision, failure.status, None, 0, 0, started, transforms, failure.message)
        if client.conn.our_state is h11.SEND_RESPONSE:
            await client.send(h11.Response(status_code=failure.status, headers=headers, reason=_reason(failure.status)))
            if info.method != "HEAD":
                await client.send(h11.Data(data=body))
            await client.send(h11.EndOfMessage())

    async def _record(
        self,
        info: RequestInfo,
        decision: Decision,
        status: int | None,
        upstream: _Upstream | None,
        sent: int,
        received: int,
        started: float,
        transforms: Sequence[Transform],
        error: str | None,
    ) -> None:
        self.decisions["denied" if not decision.allow else "failed" if error is not None else "allowed"] += 1
        entry = AuditEntry(
            info=info,
            decision=decision,
            status_code=status,
            upstream_address=upstream.address if upstream is not None else None,
            bytes_sent=sent,
            bytes_received=received,
            duration_ms=(time.monotonic() - started) * 1000,
            transforms=tuple(transforms),
            error=error,
        )
        with trio.CancelScope(shield=True):
            try:
                await self.hooks.record(entry)
            except Exception:  # an audit failure must not break the instance's request
                log.exception("egress audit hook failed")
