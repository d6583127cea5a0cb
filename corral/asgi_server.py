"""The API's HTTP/1.1 server: ASGI on trio streams, with h11 and wsproto on the wire.

Hypercorn served the API until issue 28 measured it: on an authenticated GET it cost
more than the whole of Corral's own handling, a task spawned per request, a memory
channel and a task group between the connection and the application, a protocol
object per stream, every message passed through three layers of wrappers. A raw
hello world on it answered 1,800 requests a second on this machine's core. This
server keeps the protocol work in the libraries made for it (h11 parses and frames
HTTP/1.1, wsproto does the WebSocket handshake and frames) and does the rest in the
connection's own task:

- the application runs in the connection's task; `receive()` reads the socket itself
  when the application asks for body, so backpressure is the application's pace; a
  body that came in whole with the head, or a small one (`EAGER_BODY_BYTES`) that
  followed it within `EAGER_BODY_SECONDS`, is also offered in the scope, as the
  extension `corral.whole_body` (bytes), so that an application may skip `receive()`
  for it (the API's front then needs no task to read it);
- a response's head and a whole body go out in one write (a JSON answer is one
  `send` system call), with `Content-Length` added when the application gave none;
- `Expect: 100-continue` is answered when the application first asks for the body;
- an answer given before the request body came in (a 401 for a missing key, the 413
  of a body too large) goes out at once; the rest of the body is then read and
  dropped, up to `ServerConfig.max_body_bytes` and `DRAIN_SECONDS`, so the
  connection stays reusable, or else closed (the answer says `Connection: close`
  when the declared length is already past the limit);
- after the request body, `receive()` waits for the client to go away
  (`http.disconnect`), which is how a streamed answer (SSE) learns the client left;
- WebSockets: an `Upgrade: websocket` request gets a `websocket` scope; the
  application accepts (101 through wsproto), closes before accepting (403), or
  answers with a whole HTTP response (the `websocket.http.response` extension);
- ASGI lifespan, as hypercorn ran it: startup before the listener opens, shutdown
  after the last connection;
- a graceful stop: the listeners close, idle keep-alive connections close at once,
  requests in flight get `grace_seconds` to finish, then everything is cancelled.

HTTP/2 is not served: the API sits behind loopback clients, a load balancer or the
Caddy edge, each of which speaks HTTP/1.1 to it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote_to_bytes

import h11
import trio
import wsproto
import wsproto.events as ws_events
from wsproto.handshake import H11Handshake
from wsproto.utilities import LocalProtocolError as WsLocalProtocolError

from corral.sockets import DirectSocket

log = logging.getLogger("corral.http.server")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

READ_SIZE = 65536
MAX_HEAD_BYTES = 64 * 1024
"""The largest request line and headers taken (h11's default is 16 KiB; browsers'
cookies and long query strings fit in 64)."""
DRAIN_SECONDS = 10.0
"""How long the rest of a body an early answer did not wait for may take to come in."""
EAGER_BODY_BYTES = 64 * 1024
EAGER_BODY_SECONDS = 1.0
"""How long a small body that did not come with its head is waited for before the
application is called anyway (it then reads the rest through `receive()`)."""
WS_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ASGI_VERSION = {"version": "3.0", "spec_version": "2.3"}


class _Date:
    """The `Date` header (RFC 9110 §6.6.1), formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode()
        return self._value


_date = _Date()


@dataclass
class ServerConfig:
    host: str
    port: int
    keep_alive_seconds: float = 75.0
    """How long an idle connection (or one sending its request head) is kept."""
    grace_seconds: float = 10.0
    """How long requests in flight may take to finish after a stop."""
    max_body_bytes: int = 16 * 1024 * 1024
    """A body declared larger than this gets its early answer with `Connection: close`
    (the application refuses it: the 413); what is left of a smaller one after an
    early answer is read and dropped."""


@dataclass
class _Connections:
    """Every open connection, so that a stop can close the idle ones and cancel the rest."""

    idle: set[trio.CancelScope] = field(default_factory=set)
    all: set[trio.CancelScope] = field(default_factory=set)
    stopping: bool = False
    empty: trio.Event = field(default_factory=trio.Event)

    def stop(self) -> None:
        self.stopping = True
        for scope in list(self.idle):
            scope.cancel()
        if not self.all:
            self.empty.set()

    def cancel_all(self) -> None:
        for scope in list(self.all):
            scope.cancel()


class _ClientGone(Exception):
    """The client closed the connection, or broke the protocol, mid-request."""


class _Malformed(_ClientGone):
    """The client broke HTTP/1.1 (h11's `RemoteProtocolError`): it may get a 400."""


class _Http:
    """One request's exchange on a connection: the ASGI `receive` and `send` of it."""

    def __init__(self, conn: _Connection, request: h11.Request) -> None:
        self.conn = conn
        self.request = request
        self.body_done = False
        self.response_started = False
        self.response_done = False
        self.head: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self.head_method = request.method == b"HEAD"
        self.disconnected = False
        self.close_after = False
        self.whole_body: bytes | None = None
        self._early: list[bytes] = []
        self._more_to_read = False

    def prefetch(self) -> bytes | None:
        """The whole body, when it is in already (a GET, a small JSON POST that came
        with its head); else None, and what did come waits for `receive()`."""
        h = self.conn.h11
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError:
                event = None
            if isinstance(event, h11.Data):
                self._early.append(bytes(event.data))
                continue
            if isinstance(event, h11.EndOfMessage):
                self.body_done = True
                self.whole_body, self._early = b"".join(self._early), []
                return self.whole_body
            self._more_to_read = event is h11.NEED_DATA
            return None

    async def gather_small_body(self) -> bytes | None:
        """`prefetch`, but a small body still on its way (a declared length of at most
        `EAGER_BODY_BYTES`) is read first, for at most `EAGER_BODY_SECONDS`: clients
        such as httpx write a JSON body after the head, and an application handed the
        whole body needs no task to follow it (for the API's front that task was a
        tenth of an exec). A client waiting for `100 Continue` is not waited for."""
        whole = self.prefetch()
        if whole is not None or not self._small_body_coming():
            return whole
        with trio.move_on_after(EAGER_BODY_SECONDS):
            while whole is None and self._more_to_read and not self.conn.closed:
                await self.conn._read_more()
                whole = self.prefetch()
        return whole

    def _small_body_coming(self) -> bool:
        conn = self.conn
        if not self._more_to_read or conn.h11.client_is_waiting_for_100_continue:
            return False
        length = next((value for name, value in self.request.headers if name == b"content-length"), None)
        return length is not None and length.isdigit() and int(length) <= EAGER_BODY_BYTES

    async def receive(self) -> Message:
        conn = self.conn
        if self.disconnected or self.response_done:
            return {"type": "http.disconnect"}
        if self.whole_body is not None:  # prefetched: handed over once
            body, self.whole_body = self.whole_body, None
            return {"type": "http.request", "body": body, "more_body": False}
        if self._early:
            return {"type": "http.request", "body": self._early.pop(0), "more_body": True}
        if self.body_done:
            await conn.wait_for_close(self)
            return {"type": "http.disconnect"}
        if conn.h11.client_is_waiting_for_100_continue and not self.response_started:
            await conn.write(conn.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        try:
            event = await conn.next_event()
        except _ClientGone:
            self.disconnected = True
            return {"type": "http.disconnect"}
        if isinstance(event, h11.Data):
            return {"type": "http.request", "body": bytes(event.data), "more_body": True}
        if isinstance(event, h11.EndOfMessage):
            self.body_done = True
            return {"type": "http.request", "body": b"", "more_body": False}
        self.disconnected = True
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self.response_done:
            return
        if kind == "http.response.start":
            if self.head is not None:
                raise RuntimeError("http.response.start sent twice")
            headers = list(message.get("headers", ()))
            if not self.body_done and self.conn.declared_too_large(self.request):  # the 413 of a body too large
                headers.append((b"connection", b"close"))
                self.close_after = True
            self.head = (int(message["status"]), headers)
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if self.head is None:
            raise RuntimeError("http.response.body before http.response.start")
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        h = self.conn.h11
        out = []
        if not self.response_started:
            status, headers = self.head
            names = {bytes(name).lower() for name, _ in headers}
            if b"date" not in names:
                headers.append((b"date", _date.value()))
            if not more and b"content-length" not in names and b"transfer-encoding" not in names:
                headers.append((b"content-length", str(len(body)).encode()))
            out.append(h.send(h11.Response(status_code=status, headers=headers, reason=b"")))
            self.response_started = True
        if body and not self.head_method:
            out.append(h.send(h11.Data(data=body)))
        if not more:
            out.append(h.send(h11.EndOfMessage()))
            self.response_done = True
        data = b"".join(b for b in out if b)
        if data:
            if self.response_done:
                with trio.CancelScope(shield=True):  # the last bytes go out even as the app is cancelled
                    await self.conn.write(data)
            else:
                await self.conn.write(data)
        if self.response_done:
            self.conn.response_finished()


class _Connection:
    def __init__(self, stream: trio.SocketStream, app: AsgiApp, config: ServerConfig, connections: _Connections) -> None:
        self.app = app
        self.config = config
        self.connections = connections
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.closed = False
        self._send_lock = trio.Lock()
        self._response_finished = trio.Event()
        self._disconnect_watch: trio.CancelScope | None = None
        sock = stream.socket
        self.client = _address(sock.getpeername())
        self.server = _address(sock.getsockname())
        self.stream = DirectSocket.of_stream(stream)
        """The socket, read and written without a trip through the scheduler after a
        call that did not have to wait (`corral.sockets`): a request already in is
        served at once, and an answer's write does not hand the loop to other tasks."""

    # ---- reading and writing ----

    async def _read_more(self) -> None:
        try:
            data = await self.stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if not data:
            self.closed = True
        self.h11.receive_data(data)

    async def next_event(self) -> Any:
        """The next h11 event, reading as needed; `_ClientGone` on EOF or a protocol error."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Malformed(str(exc)) from exc
            if event is h11.NEED_DATA:
                if self.closed:
                    raise _ClientGone("connection closed")
                await self._read_more()
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise _ClientGone("connection closed")
            return event

    async def write(self, data: bytes) -> None:
        """Sends `data`; to a client that went away, drops it (as hypercorn did: the
        application learns of it from `receive()`)."""
        if self.closed:
            return
        lock = self._send_lock
        try:
            lock.acquire_nowait()  # nearly always free: no extra trip through the scheduler
        except trio.WouldBlock:
            await lock.acquire()  # a WebSocket's pong beside the application's frame
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.closed = True
        finally:
            lock.release()

    def response_finished(self) -> None:
        self._response_finished.set()
        if self._disconnect_watch is not None:
            self._disconnect_watch.cancel()

    async def wait_for_close(self, exchange: _Http) -> None:
        """Until the client goes away or the response is complete (ASGI `http.disconnect`).

        Reads on, so that a close is seen; stops reading once the client has sent more
        than this request (a pipelined next request stays buffered in h11)."""
        with trio.CancelScope() as watch:
            self._disconnect_watch = watch
            if self._response_finished.is_set():
                return
            while not self.closed:
                if self.h11.their_state is not h11.DONE or self.h11.trailing_data[0]:
                    await self._response_finished.wait()
                    return
                await self._read_more()
        self._disconnect_watch = None
        exchange.disconnected = self.closed

    def declared_too_large(self, request: h11.Request) -> bool:
        for name, value in request.headers:
            if name == b"content-length":
                try:
                    return int(value) > self.config.max_body_bytes
                except ValueError:
                    return True
        return False

    # ---- the connection's life ----

    async def serve(self) -> None:
        connections = self.connections
        scope = trio.CancelScope()
        connections.all.add(scope)
        try:
            with scope:
                await self._serve_requests(scope)
        finally:
            connections.all.discard(scope)
            connections.idle.discard(scope)
            if connections.stopping and not connections.all:
                connections.empty.set()
            self.stream.close()

    async def _serve_requests(self, scope: trio.CancelScope) -> None:
        connections = self.connections
        while True:
            if connections.stopping:
                return
            idle = trio.CancelScope(deadline=trio.current_time() + self.config.keep_alive_seconds)
            connections.idle.add(scope)
            try:
                with idle:
                    try:
                        event = await self.next_event()
                    except _ClientGone as exc:
                        if isinstance(exc, _Malformed) and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                            await self._error_response(400, str(exc))
                        return
            finally:
                connections.idle.discard(scope)
            if idle.cancelled_caught or not isinstance(event, h11.Request):
                return
            if _is_websocket(event):
                await self._websocket(event)
                return
            exchange = _Http(self, event)
            self._response_finished = trio.Event()
            asgi_scope = self._http_scope(event)
            whole = await exchange.gather_small_body()
            if whole is not None:
                asgi_scope["extensions"]["corral.whole_body"] = whole
            try:
                await self.app(asgi_scope, exchange.receive, exchange.send)
            except Exception:
                log.exception("the application failed on %s %s", event.method.decode(), event.target.decode("latin-1"))
                if not exchange.response_started:
                    await self._error_response(500, "Internal Server Error")
                return
            if not exchange.response_done:
                if not exchange.response_started:
                    await self._error_response(500, "the application sent no response")
                return
            if exchange.close_after or self.h11.our_state is not h11.DONE:
                return
            if not await self._finish_request_body():
                return
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return
            # One scheduler trip a request, after its answer went out: the socket skips
            # the trips of calls that need no wait (`DirectSocket`), so a kept-alive
            # connection whose next request is already in would otherwise serve request
            # after request while the other connections wait (p99 at 16 connections
            # went from 6 to 40 ms without this).
            await trio.lowlevel.checkpoint()

    async def _finish_request_body(self) -> bool:
        """Reads and drops what is left of a request body the answer did not wait for."""
        if self.h11.their_state is h11.DONE:
            return True
        if self.h11.their_state is not h11.SEND_BODY:
            return False
        dropped = 0
        with trio.move_on_after(DRAIN_SECONDS):
            while True:
                try:
                    event = await self.next_event()
                except _ClientGone:
                    return False
                if isinstance(event, h11.EndOfMessage):
                    return True
                if isinstance(event, h11.Data):
                    dropped += len(event.data)
                    if dropped > self.config.max_body_bytes:
                        return False
        return False

    async def _error_response(self, status: int, text: str) -> None:
        body = (text + "\n").encode("utf-8", "replace")
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close"), (b"date", _date.value())]
        try:
            data = self.h11.send(h11.Response(status_code=status, headers=headers, reason=b""))
            data += self.h11.send(h11.Data(data=body)) + self.h11.send(h11.EndOfMessage())
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.write(data)
        except h11.LocalProtocolError:  # past the point where an answer may be sent
            pass

    def _http_scope(self, request: h11.Request) -> dict[str, Any]:
        raw_path, _, query = request.target.partition(b"?")
        return {
            "type": "http",
            "asgi": ASGI_VERSION,
            "http_version": request.http_version.decode(),
            "method": request.method.decode("ascii"),
            "scheme": "http",
            "path": unquote_to_bytes(raw_path).decode("utf-8", "surrogateescape"),
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": list(request.headers),
            "client": self.client,
            "server": self.server,
            "extensions": {},
        }

    # ---- WebSockets ----

    async def _websocket(self, request: h11.Request) -> None:
        socket = _WebSocket(self, request)
        raw_path, _, query = request.target.partition(b"?")
        headers = list(request.headers)
        subprotocols = [p.strip() for name, value in headers if name == b"sec-websocket-protocol"
                        for p in value.decode("latin-1").split(",") if p.strip()]
        scope: dict[str, Any] = {
            "type": "websocket",
            "asgi": ASGI_VERSION,
            "http_version": request.http_version.decode(),
            "scheme": "ws",
            "path": unquote_to_bytes(raw_path).decode("utf-8", "surrogateescape"),
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": self.client,
            "server": self.server,
            "subprotocols": subprotocols,
            "extensions": {"websocket.http.response": {}},
        }
        try:
            await self.app(scope, socket.receive, socket.send)
        except Exception:
            log.exception("the application failed on WebSocket %s", request.target.decode("latin-1"))
        await socket.finish()


class _WebSocket:
    """One WebSocket's ASGI `receive` and `send`: wsproto frames on the connection's stream."""

    def __init__(self, conn: _Connection, request: h11.Request) -> None:
        self.conn = conn
        self.request = request
        self.handshake = H11Handshake(wsproto.ConnectionType.SERVER)
        self.handshake.initiate_upgrade_connection(list(request.headers), request.target)
        self.ws: wsproto.Connection | None = None
        self.connect_sent = False
        self.accepted = False
        self.closed = False
        self.rejecting = False
        self.responded = False
        self._parts: list[Any] = []
        self._pending: list[Message] = []
        self._opened = trio.Event()
        """Set once the application accepted, refused or answered the handshake."""
        self._reject_head: tuple[int, list[tuple[bytes, bytes]]] = (500, [])

    async def receive(self) -> Message:
        if not self.connect_sent:
            self.connect_sent = True
            return {"type": "websocket.connect"}
        while True:
            if self._pending:
                return self._pending.pop(0)
            if self.ws is None and not self.closed:
                await self._opened.wait()  # nothing is read before the application accepts
                continue
            if self.closed or self.ws is None:
                return {"type": "websocket.disconnect", "code": 1006}
            await self._pump()

    async def _pump(self) -> None:
        assert self.ws is not None
        try:
            data = await self.conn.stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if not data:
            self.ws.receive_data(None)
        else:
            self.ws.receive_data(data)
        try:
            for event in self.ws.events():
                await self._on_event(event)
        except WsLocalProtocolError:
            self.closed = True
            self._pending.append({"type": "websocket.disconnect", "code": 1002})
        if not data and not self.closed:
            self.closed = True
            self._pending.append({"type": "websocket.disconnect", "code": 1006})

    async def _on_event(self, event: ws_events.Event) -> None:
        assert self.ws is not None
        if isinstance(event, ws_events.TextMessage | ws_events.BytesMessage):
            self._parts.append(event.data)
            if sum(len(p) for p in self._parts) > WS_MAX_MESSAGE_BYTES:
                await self._send_ws(ws_events.CloseConnection(code=1009, reason="message too big"))
                self.closed = True
                self._pending.append({"type": "websocket.disconnect", "code": 1009})
                return
            if event.message_finished:
                if isinstance(event, ws_events.TextMessage):
                    self._pending.append({"type": "websocket.receive", "text": "".join(str(p) for p in self._parts)})
                else:
                    self._pending.append({"type": "websocket.receive", "bytes": b"".join(bytes(p) for p in self._parts)})
                self._parts = []
        elif isinstance(event, ws_events.Ping):
            await self._send_ws(event.response())
        elif isinstance(event, ws_events.CloseConnection):
            if self.ws.state is wsproto.connection.ConnectionState.REMOTE_CLOSING:
                await self._send_ws(event.response())
            self.closed = True
            self._pending.append({"type": "websocket.disconnect", "code": event.code, "reason": event.reason or ""})

    async def _send_ws(self, event: ws_events.Event) -> None:
        assert self.ws is not None
        try:
            data = self.ws.send(event)
        except WsLocalProtocolError:
            return
        if data:
            await self.conn.write(data)

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            if self.accepted or self.rejecting:
                raise RuntimeError("websocket.accept after the handshake")
            extra = [(bytes(n), bytes(v)) for n, v in message.get("headers", ())]
            data = self.handshake.send(ws_events.AcceptConnection(subprotocol=message.get("subprotocol"), extra_headers=extra))
            self.ws = self.handshake.connection
            self.accepted = True
            self._opened.set()
            await self.conn.write(data)
            trailing = self.conn.h11.trailing_data[0]
            if trailing:  # frames that came with the upgrade request
                self.ws.receive_data(bytes(trailing))  # type: ignore[union-attr]
                for event in self.ws.events():  # type: ignore[union-attr]
                    await self._on_event(event)
        elif kind == "websocket.send":
            if not self.accepted:
                raise RuntimeError("websocket.send before websocket.accept")
            if self.closed:
                return  # the client went away: dropped, as a write to a closed connection
            if message.get("bytes") is not None:
                await self._send_ws(ws_events.BytesMessage(data=message["bytes"]))
            else:
                await self._send_ws(ws_events.TextMessage(data=message.get("text") or ""))
        elif kind == "websocket.close":
            if not self.accepted:
                await self._reject(403, [], b"", True)
                return
            if not self.closed:
                await self._send_ws(ws_events.CloseConnection(code=int(message.get("code", 1000)), reason=message.get("reason") or None))
                self.closed = True
        elif kind == "websocket.http.response.start":
            if self.accepted or self.rejecting:
                raise RuntimeError("websocket.http.response.start after the handshake")
            self.rejecting = True
            headers = [(bytes(n), bytes(v)) for n, v in message.get("headers", ())]
            self._reject_head = (int(message["status"]), headers)
        elif kind == "websocket.http.response.body":
            if not self.rejecting:
                raise RuntimeError("websocket.http.response.body before its start")
            status, headers = self._reject_head
            await self._reject(status, headers, bytes(message.get("body", b"")), not message.get("more_body", False))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    async def _reject(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, finished: bool) -> None:
        """An HTTP answer instead of the upgrade (h11 frames it: the handshake is h11's)."""
        h = self.conn.h11
        out = b""
        if not self.responded:
            names = {n.lower() for n, _ in headers}
            if finished and b"content-length" not in names:
                headers = [*headers, (b"content-length", str(len(body)).encode())]
            headers = [*headers, (b"connection", b"close"), (b"date", _date.value())]
            out += h.send(h11.Response(status_code=status, headers=headers, reason=b""))
            self.responded = True
        if body:
            out += h.send(h11.Data(data=body))
        if finished:
            out += h.send(h11.EndOfMessage())
            self.closed = True
            self._opened.set()
        await self.conn.write(out)

    async def finish(self) -> None:
        """After the application: a close frame if it left without one, or a 500 if it
        neither accepted nor answered."""
        if self.accepted and not self.closed and self.ws is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self._send_ws(ws_events.CloseConnection(code=1000))
        elif not self.accepted and not self.responded:
            with trio.CancelScope(shield=True), trio.move_on_after(1), contextlib.suppress(h11.LocalProtocolError):
                await self._reject(500, [], b"", True)


def _is_websocket(request: h11.Request) -> bool:
    upgrade = connection = False
    for name, value in request.headers:
        if name == b"upgrade" and value.lower() == b"websocket":
            upgrade = True
        elif name == b"connection" and b"upgrade" in value.lower():
            connection = True
    return upgrade and connection and request.method == b"GET"


def _address(address: Any) -> tuple[str, int] | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None


async def _lifespan(app: AsgiApp, *, task_status: trio.TaskStatus[Callable[[], Awaitable[None]]]) -> None:
    """Runs the application's lifespan; started once startup completed, with a callable
    that asks for shutdown and waits for it. An application without one starts at once."""
    to_app, app_inbox = trio.open_memory_channel[Message](2)
    from_app, replies = trio.open_memory_channel[Message](4)

    async def run() -> None:
        try:
            await app({"type": "lifespan", "asgi": ASGI_VERSION, "state": {}}, app_inbox.receive, from_app.send)
        except Exception:
            log.debug("the application runs no lifespan", exc_info=True)
        finally:
            from_app.send_nowait({"type": "lifespan.ended"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await to_app.send({"type": "lifespan.startup"})
        reply = await replies.receive()
        if reply["type"] == "lifespan.startup.failed":
            raise RuntimeError(f"the application failed to start: {reply.get('message', '')}")
        ended = reply["type"] == "lifespan.ended"

        async def shutdown() -> None:
            if ended:
                return
            await to_app.send({"type": "lifespan.shutdown"})
            with trio.move_on_after(30):
                while (await replies.receive())["type"] not in ("lifespan.shutdown.complete", "lifespan.shutdown.failed", "lifespan.ended"):
                    pass

        task_status.started(shutdown)


async def serve(
    app: AsgiApp,
    config: ServerConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[Any]],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves `app` on `config.host:config.port` until `shutdown_trigger()` returns;
    started once listening. Then stops gracefully (the module's docstring)."""
    connections = _Connections()
    async with trio.open_nursery() as outer:
        shutdown_app = await outer.start(_lifespan, app)
        listeners = await trio.open_tcp_listeners(config.port, host=config.host)
        async with trio.open_nursery() as handlers:

            async def handle(stream: trio.SocketStream) -> None:
                await _Connection(stream, app, config, connections).serve()

            async with trio.open_nursery() as accepting:
                accepting.start_soon(functools.partial(trio.serve_listeners, handle, listeners, handler_nursery=handlers))
                task_status.started()
                await shutdown_trigger()
                accepting.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            connections.stop()
            with trio.move_on_after(config.grace_seconds):
                await connections.empty.wait()
            connections.cancel_all()
        await shutdown_app()
        outer.cancel_scope.cancel()


__all__ = ["ServerConfig", "serve"]
