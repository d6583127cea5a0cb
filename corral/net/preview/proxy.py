"""The preview router: its own listener, routing by Host, streaming both ways.

One trio task per client connection. For each request: read and check the head,
ask the route's resolver, then relay: the rewritten head to the app, the request
body (raw, as it arrives, concurrently with the response so `Expect: 100-continue`
and early answers work), the response head and body (raw, as they arrive: a slow
chunked response or an event stream reaches the browser chunk by chunk). A
WebSocket (any `Upgrade`) answered 101 becomes a byte tunnel in both directions.
Client connections are kept alive, and so is the connection to the app while the
next request goes to the same app.

The router adds `X-Forwarded-For` (appended), `X-Forwarded-Proto` and
`X-Forwarded-Host`, and removes hop-by-hop headers. When no app listens it answers
a 502 page saying so. An app's `Set-Cookie` reaches the browser only when it stays
with the app's own host (`_AppCookies`): previews of every tenant share one parent
domain. On a tenant's own domain its parents are the tenant's, and allowed.

A resolver may instead relay a request to another node's router (`Forward.relay`,
for an instance that lives there): the head goes on as it came, with the signed
`RELAY_HEADER` the resolver adds, and the next router adds the `X-Forwarded-*`
headers. A router given a `relay_check` takes a relayed request's client address
from that header when its signature holds (`Head.relayed_by` then names the relaying
node), so apps see the same client through any node.

Every request leaves one `corral.access` line when it is done (a WebSocket's when the
tunnel closes): host, method, status, duration and the response's length when known.
Never the path: a preview URL may carry `?token=`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket as stdlib_socket
import time
from dataclasses import dataclass

import trio

from . import pages
from .http1 import (
    Buffered,
    Framing,
    Head,
    HttpError,
    PeerClosed,
    Yielder,
    parse_request,
    parse_response,
    recv_some,
    relay_body,
    send_all,
    status_line,
)
from .routes import RELAY_HEADER, Forward, PreviewRequest, RelayCheck, Reply, RouteTable, Upstream
from .upstream import Connector, UpstreamUnreachable, looks_closed

log = logging.getLogger("corral.net.preview")
access_log = logging.getLogger("corral.access")

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "proxy-authorization",
    "proxy-authenticate",
})
FORWARDED = frozenset({"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})
EDGE_ONLY = frozenset({"x-corral-edge", RELAY_HEADER})
HEALTH_PATH = "/healthz"
"""`GET /healthz` with a host that names no preview (a load balancer's check of the
router, by its address) answers 200 `ok`; on a preview's host it is that preview's."""
"""Headers the TLS edge (`corral.net.edge`) or another node's router adds for this
router: never passed to an app, nor on to another node's router (an edge's secret is
its own node's; a relay header is signed anew by the node that relays)."""


class _AppConnection:
    __slots__ = ("key", "reader")

    def __init__(self, key: Upstream, reader: Buffered) -> None:
        self.key = key
        self.reader = reader

    def close(self) -> None:
        self.reader.sock.close()


class _Exchange:
    """State of one client connection: its reader and the kept-alive app connection."""

    __slots__ = ("app", "client", "host", "origin", "peer", "sent", "status")

    def __init__(self, client: Buffered, peer: str) -> None:
        self.client = client
        self.peer = peer
        self.origin = peer
        """The current request's client: `peer`, or for a request another node's router
        relayed here, the client address it signed."""
        self.app: _AppConnection | None = None
        self.host = "-"
        """The current request's host name, its status and the bytes of its answer
        (None when the body is relayed without a length): for the access line."""
        self.status = 0
        self.sent: int | None = None

    def drop_app(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = None


class PreviewRouter:
    def __init__(
        self,
        table: RouteTable,
        *,
        scheme: str = "http",
        idle_timeout: float = 75.0,
        connect_timeout: float = 5.0,
        relay_check: RelayCheck | None = None,
    ) -> None:
        self.table = table
        self.relay_check = relay_check
        """Checks `RELAY_HEADER` (requests other nodes' routers relay here); None: no
        request is taken for relayed, and the header is only dropped."""
        self.scheme = scheme
        self.idle_timeout = idle_timeout
        self.connector = Connector(connect_timeout)
        self.connections = 0
        self.bound_port: int | None = None

    async def serve(self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on host:port until cancelled; `task_status.started(port)` once listening."""
        family = stdlib_socket.AF_INET6 if ":" in host else stdlib_socket.AF_INET
        listener = trio.socket.socket(family, stdlib_socket.SOCK_STREAM)
        listener.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
        try:
            await listener.bind((host, port))
            listener.listen(1024)
            self.bound_port = int(listener.getsockname()[1])
            task_status.started(self.bound_port)
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        sock, address = await listener.accept()
                    except OSError as exc:  # EMFILE and friends: do not spin
                        log.warning("preview router accept failed: %s", exc)
                        await trio.sleep(0.1)
                        continue
                    sock.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
                    nursery.start_soon(self._connection, sock, str(address[0]))
        finally:
            listener.close()

    async def _connection(self, sock: trio.socket.SocketType, peer: str) -> None:
        self.connections += 1
        exchange = _Exchange(Buffered(sock), peer)
        try:
            # One cancel scope for the connection's life: its deadline is the idle timeout
            # while a head is awaited, and lifted while a request is served (a stream or a
            # WebSocket may last for hours).
            with trio.CancelScope() as idle:
                while True:
                    idle.deadline = trio.current_time() + self.idle_timeout
                    head = await exchange.client.read_head()
                    idle.deadline = math.inf
                    if head is None:
                        return  # the client went away
                    try:
                        request = parse_request(head)
                    except HttpError as exc:
                        await self._write_reply(sock, pages.bad_request(exc.status, exc.message), "GET", close=True)
                        return
                    if not await self._served(exchange, request):
                        return
        except HttpError as exc:
            if exc.status < 500:
                await self._reply_quietly(sock, pages.bad_request(exc.status, exc.message))
        except (OSError, PeerClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("preview connection from %s failed", peer)
        finally:
            self.connections -= 1
            exchange.drop_app()
            sock.close()

    async def _reply_quietly(self, sock: trio.socket.SocketType, reply: Reply) -> None:
        with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await self._write_reply(sock, reply, "GET", close=True)

    # -- one request ------------------------------------------------------------------

    async def _served(self, exchange: _Exchange, request: Head) -> bool:
        """`_handle`, and its access line however it ended."""
        exchange.host, exchange.status, exchange.sent = "-", 0, None
        started = time.perf_counter()
        try:
            return await self._handle(exchange, request)
        finally:
            _access_line(exchange, request.first[0], time.perf_counter() - started)

    async def _handle(self, exchange: _Exchange, request: Head) -> bool:
        """Serve one request; whether the client connection may carry another."""
        method, target, version = request.first
        client_keep = _client_wants_keepalive(version, request.connection_tokens)
        host_header = request.get("host")
        if target.startswith(("http://", "https://")):  # absolute form: the host is in the target
            scheme_end = target.index("//") + 2
            slash = target.find("/", scheme_end)
            host_header = target[scheme_end:] if slash < 0 else target[scheme_end:slash]
            target = "/" if slash < 0 else target[slash:]
            request.first = (method, target, version)
        if not host_header:
            return await self._refuse(exchange, request, pages.bad_request(400, "The request has no Host header."), False)
        host = _host_name(host_header)
        exchange.host = host
        exchange.origin = self._origin(request, exchange.peer)
        route = self.table.match(host)
        if route is None:
            if target == HEALTH_PATH and method in ("GET", "HEAD"):  # a load balancer's check (no preview's host)
                healthy = Reply(200, b"ok\n", (("Cache-Control", "no-store"),), "text/plain")
                return await self._refuse(exchange, request, healthy, client_keep)
            return await self._refuse(exchange, request, pages.no_route(host), client_keep)
        resolver, match = route
        try:
            decision = await resolver(PreviewRequest(request, host, exchange.origin), match)
        except Exception:
            log.exception("the preview resolver failed for %s", host)
            return await self._refuse(exchange, request, pages.router_failed(), False)
        if isinstance(decision, Reply):
            return await self._refuse(exchange, request, decision, client_keep)
        return await self._forward(exchange, request, decision, host_header, client_keep)

    def _origin(self, request: Head, peer: str) -> str:
        """The client's address: `peer`, unless another node's router relayed the request
        and signed the address it came from (then `request.relayed_by` is that node)."""
        relayed = request.get(RELAY_HEADER)
        if relayed is None or self.relay_check is None:
            return peer
        checked = self.relay_check(relayed)
        if checked is None:
            return peer
        request.relayed_by = checked[0]
        return checked[1]

    async def _refuse(self, exchange: _Exchange, request: Head, reply: Reply, client_keep: bool) -> bool:
        # An unread request body would be taken for the next request: close instead.
        keep = client_keep and request.framing is Framing.NONE
        exchange.status = reply.status
        exchange.sent = await self._write_reply(exchange.client.sock, reply, request.first[0], close=not keep)
        return keep

    async def _write_reply(self, sock: trio.socket.SocketType, reply: Reply, method: str, *, close: bool) -> int:
        """Send `reply`; the length of its body."""
        lines = [status_line("HTTP/1.1", reply.status)]
        source = None
        length = len(reply.body)
        if reply.file is not None:
            source = await trio.open_file(reply.file, "rb")
            length = (await trio.to_thread.run_sync(os.fstat, source.fileno())).st_size
        try:
            if reply.status != 304:  # a 304 has neither: its validators are in `headers`
                lines.append(f"Content-Type: {reply.content_type}")
                lines.append(f"Content-Length: {length}")
            lines.extend(f"{name}: {value}" for name, value in reply.headers)
            if close:
                lines.append("Connection: close")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            if source is None or method == "HEAD":
                await send_all(sock, head if method == "HEAD" else head + reply.body)
                return length
            await send_all(sock, head)
            left = length
            while left > 0:
                chunk = await source.read(min(FILE_CHUNK, left))
                if not chunk:
                    raise PeerClosed("the file got shorter while it was sent")
                await send_all(sock, chunk)
                left -= len(chunk)
            return length
        finally:
            if source is not None:
                await source.aclose()

    async def _app(self, exchange: _Exchange, upstream: Upstream) -> tuple[_AppConnection, bool]:
        """The connection to `upstream`: the kept-alive one if still usable (then True), else a new one."""
        app = exchange.app
        if app is not None:
            if app.key == upstream and not app.reader.buf and not looks_closed(app.reader.sock):
                return app, True
            exchange.drop_app()
        sock = await self.connector.connect(upstream)
        exchange.app = _AppConnection(upstream, Buffered(sock))
        return exchange.app, False

    def _upstream_head(self, request: Head, decision: Forward, host_header: str, peer: str) -> bytes:
        method, target, version = request.first
        if decision.target is not None:
            target = decision.target
        upgrade = "upgrade" in request.connection_tokens and request.get("upgrade")
        lines = [f"{method} {target} {version}"]
        if decision.relay:
            return _relayed_head(lines, request, decision, host_header, upgrade)
        forwarded_for = None
        drop = decision.drop_headers | {name.lower() for name, _ in decision.add_headers}
        for lower, name, value in request.headers:
            if lower in HOP_BY_HOP or lower in request.connection_tokens or lower in drop or lower in EDGE_ONLY:
                continue
            if lower in FORWARDED:
                if lower == "x-forwarded-for":
                    forwarded_for = f"{forwarded_for}, {value}" if forwarded_for else value
                continue
            if lower == "cookie" and decision.drop_cookies:
                value = _without_cookies(value, decision.drop_cookies)
                if not value:
                    continue
            lines.append(f"{name}: {value}")
        lines.append(f"X-Forwarded-For: {forwarded_for}, {peer}" if forwarded_for else f"X-Forwarded-For: {peer}")
        lines.append(f"X-Forwarded-Proto: {self.scheme}")
        lines.append(f"X-Forwarded-Host: {host_header}")
        lines.extend(f"{name}: {value}" for name, value in decision.add_headers)
        if upgrade:
            lines.append("Connection: Upgrade")
            lines.append(f"Upgrade: {upgrade}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _forward(self, exchange: _Exchange, request: Head, decision: Forward, host_header: str, client_keep: bool) -> bool:
        upstream = decision.upstream
        head = self._upstream_head(request, decision, host_header, exchange.origin)
        has_body = request.framing is not Framing.NONE
        for attempt in (1, 2):
            try:
                app, reused = await self._app(exchange, upstream)
            except UpstreamUnreachable:
                reply = decision.unreachable or pages.not_listening(upstream.label, upstream.port)
                return await self._refuse(exchange, request, reply, client_keep)
            if has_body:
                break  # a body cannot be replayed: no retry below
            try:
                await send_all(app.reader.sock, head)
                response_head = await app.reader.read_head()
            except (OSError, PeerClosed):
                response_head = None
            if response_head is not None:
                return await self._respond(exchange, request, decision, app, response_head, client_keep, host_header)
            exchange.drop_app()
            if not reused or attempt == 2:
                reply = pages.upstream_failed(upstream.label, "closed the connection without answering")
                return await self._refuse(exchange, request, reply, client_keep)
            # a kept-alive connection the app had closed meanwhile: once more on a new one
        return await self._forward_with_body(exchange, request, decision, app, head, client_keep, host_header)

    async def _forward_with_body(
        self, exchange: _Exchange, request: Head, decision: Forward, app: _AppConnection, head: bytes, client_keep: bool,
        host_header: str,
    ) -> bool:
        failed = False
        finished = False

        async def send_request(cancel: trio.CancelScope) -> None:
            nonlocal failed, finished
            try:
                await send_all(app.reader.sock, head)
                await relay_body(exchange.client, app.reader.sock, request.framing, request.length)
                finished = True
            except (OSError, PeerClosed, HttpError, trio.BrokenResourceError, trio.ClosedResourceError):
                failed = True
                cancel.cancel()

        keep = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_request, nursery.cancel_scope)
            try:
                response_head = await app.reader.read_head()
            except (OSError, PeerClosed):
                response_head = None
            if response_head is None:
                nursery.cancel_scope.cancel()
                exchange.drop_app()
                reply = pages.upstream_failed(decision.upstream.label, "closed the connection without answering")
                await self._refuse(exchange, request, reply, False)
                return False
            keep = await self._respond(exchange, request, decision, app, response_head, client_keep, host_header)
            if not finished:
                nursery.cancel_scope.cancel()  # the app answered before reading the whole body
        if failed or not finished:
            exchange.drop_app()
            return False
        return keep

    async def _respond(
        self, exchange: _Exchange, request: Head, decision: Forward, app: _AppConnection, raw_head: bytes, client_keep: bool,
        host_header: str,
    ) -> bool:
        """Relay the app's response (after any 1xx); whether the client connection stays open."""
        method = request.first[0]
        client = exchange.client.sock
        # Another node's router filtered what it relays; here the app's own cookies are.
        cookies = None if decision.relay else _AppCookies(_host_name(host_header), decision.drop_cookies, decision.own_domain)
        while True:
            try:
                response, status = parse_response(raw_head, method)
            except HttpError as exc:
                exchange.drop_app()
                await self._refuse(exchange, request, pages.upstream_failed(decision.upstream.label, f"answered badly: {exc.message}"), False)
                return False
            if status == 101 and "upgrade" in request.connection_tokens:
                exchange.status = 101
                await send_all(client, _response_head(response, (), decision.response_headers, keep_upgrade=True, cookies=cookies))
                await _tunnel(exchange.client, app.reader)
                exchange.drop_app()
                return False
            if 100 <= status < 200:
                await send_all(client, _response_head(response, (), (), keep_upgrade=False))
                next_head = await app.reader.read_head()
                if next_head is None:
                    raise PeerClosed("the app closed the connection after an interim response")
                raw_head = next_head
                continue
            break
        app_keep = _app_keeps_alive(response) and response.framing is not Framing.UNTIL_CLOSE
        keep = client_keep and response.framing is not Framing.UNTIL_CLOSE
        version = request.first[2]
        if not keep:
            extra: tuple[tuple[str, str], ...] = (("Connection", "close"),)
        elif version == "HTTP/1.0":
            extra = (("Connection", "keep-alive"),)
        else:
            extra = ()
        head = _response_head(response, extra, decision.response_headers, keep_upgrade=False, cookies=cookies)
        exchange.status = status
        exchange.sent = response.length if response.framing is Framing.LENGTH else None
        if response.framing is Framing.LENGTH and len(app.reader.buf) >= response.length:
            await send_all(client, head + app.reader.take(response.length))  # the common small answer: one write
        else:
            await send_all(client, head)
            try:
                await relay_body(app.reader, client, response.framing, response.length)
            except HttpError as exc:  # the head is out: all that is left is to cut the connection
                raise PeerClosed(f"the app's body was malformed: {exc.message}") from exc
        if not app_keep or app.reader.buf:
            exchange.drop_app()
        return keep


FILE_CHUNK = 256 * 1024


def _access_line(exchange: _Exchange, method: str, seconds: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    duration_ms = round(seconds * 1000, 2)
    size = "-" if exchange.sent is None else f"{exchange.sent}B"
    access_log.info(
        "preview %s %s %d %.2fms %s", method, exchange.host, exchange.status, duration_ms, size,
        extra={
            "kind": "preview", "method": method, "host": exchange.host, "status": exchange.status,
            "duration_ms": duration_ms, "bytes": exchange.sent,
        },
    )


def _relayed_head(lines: list[str], request: Head, decision: Forward, host_header: str, upgrade: str | bool | None) -> bytes:
    """The head of a request relayed to another node's router: as it came, but for its
    hop-by-hop headers, with `decision.add_headers` (the signed relay header)."""
    has_host = False
    for lower, name, value in request.headers:
        if lower in HOP_BY_HOP or lower in request.connection_tokens or lower in EDGE_ONLY:
            continue
        has_host = has_host or lower == "host"
        lines.append(f"{name}: {value}")
    if not has_host:  # an absolute-form target named the host
        lines.append(f"Host: {host_header}")
    lines.extend(f"{name}: {value}" for name, value in decision.add_headers)
    if upgrade:
        lines.append("Connection: Upgrade")
        lines.append(f"Upgrade: {upgrade}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _client_wants_keepalive(version: str, tokens: frozenset[str]) -> bool:
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens


def _app_keeps_alive(response: Head) -> bool:
    if response.first[0] == "HTTP/1.1":
        return "close" not in response.connection_tokens
    return "keep-alive" in response.connection_tokens


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0].rstrip(".") if ":" in host else host.rstrip(".")


def _without_cookies(value: str, names: frozenset[str]) -> str:
    kept = [pair for pair in value.split(";") if pair.strip().partition("=")[0] not in names]
    return ";".join(kept).strip()


@dataclass(frozen=True, slots=True)
class _AppCookies:
    """Which of an app's `Set-Cookie`s reach the browser: those that stay with the app's
    own host. One with a `Domain` other than that host would be sent to its parent
    domain, and so to every other tenant's preview host under it (cookie tossing:
    previews share `*.sandbox.<domain>`, which no public suffix list separates); one
    named as the router's own cookies would stand in for a visitor's token."""

    host: str
    reserved: frozenset[str]
    parents: bool = False
    """The host is the tenant's own domain: a `Domain` of one of its parents is allowed."""

    def allow(self, value: str) -> bool:
        name, _, rest = value.partition("=")
        if name.strip() in self.reserved:
            return False
        for attribute in rest.split(";")[1:]:
            key, _, domain = attribute.partition("=")
            if key.strip().lower() == "domain" and not self._covers(domain.strip().lstrip(".").lower()):
                return False
        return True

    def _covers(self, domain: str) -> bool:
        return domain == self.host or (self.parents and "." in domain and self.host.endswith("." + domain))


def _response_head(
    response: Head, extra: tuple[tuple[str, str], ...], added: tuple[tuple[str, str], ...], *, keep_upgrade: bool,
    cookies: _AppCookies | None = None,
) -> bytes:
    version, code, reason = response.first
    # An app's empty reason (h11 writes `HTTP/1.1 101 `) gets the standard one: the line
    # must keep ` SP reason-phrase`, or strict clients (`websockets`) refuse the upgrade.
    lines = [status_line(version, code, reason.strip(" \t"))]
    for lower, name, value in response.headers:
        if keep_upgrade and lower in ("connection", "upgrade"):
            lines.append(f"{name}: {value}")
            continue
        if lower in HOP_BY_HOP or lower in response.connection_tokens:
            continue
        if lower == "set-cookie" and cookies is not None and not cookies.allow(value):
            continue
        lines.append(f"{name}: {value}")
    lines.extend(f"{name}: {value}" for name, value in extra)
    lines.extend(f"{name}: {value}" for name, value in added)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _tunnel(a: Buffered, b: Buffered) -> None:
    """Copy bytes both ways until both sides are done (a WebSocket after its 101)."""

    async def pump(src: Buffered, dst: Buffered, cancel: trio.CancelScope) -> None:
        fair = Yielder()
        try:
            if src.buf:
                await send_all(dst.sock, src.take())
            while True:
                data = await recv_some(src.sock)
                if not data:
                    break
                await send_all(dst.sock, data)
                await fair.tick()
            with contextlib.suppress(OSError):
                dst.sock.shutdown(stdlib_socket.SHUT_WR)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            cancel.cancel()  # one side is gone: so is the tunnel

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, a, b, nursery.cancel_scope)
        nursery.start_soon(pump, b, a, nursery.cancel_scope)
