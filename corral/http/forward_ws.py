"""A WebSocket for a resource that lives on another node, forwarded there (issue 30).

`forward.py` forwards a resource's HTTP requests to its home node; this does the same
for a WebSocket under `/api/v1/{sandboxes|computers|databases}/{id}`: the handshake is
made again from here to the home's advertised URL, as the caller made it (path and
query, Host, Origin, cookies, credentials, the subprotocols it offered), with the
signed `X-Corral-Forwarded` caller's address, so the home authenticates, checks and
serves it as if asked directly. Its answer comes back as it gave it: the accepted
subprotocol, or its refusal (status, headers and error envelope). Then messages go
both ways whole, text as text and binary as binary, and the close code and reason of
whichever side closes first reach the other. A caller that vanishes (no close frame)
is a vanished connection at the home too.

Each forwarded WebSocket has a TCP connection of its own (WebSockets live long; there
is nothing to keep alive between them), on wsproto, which the server already uses.
The terminals and desktops of computers and the ports of sandboxes are WebSockets of
the preview router, which relays them to the home's router itself
(`corral.actors.previews.remote`); this covers the API's own.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from corral.actors.nodes.homes import Home
from corral.errors import ApiError

from .forward import HEADER, Forwarder, Receive, Send
from .pipeline import error_answer, new_request_id
from .replies import JsonAnswer

log = logging.getLogger("corral.http.forward")

READ_SIZE = 65536
CONNECT_SECONDS = 5.0
HANDSHAKE_SECONDS = 30.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""As the server's own limit on a message it takes (`corral.asgi_server`)."""
MAX_REFUSAL_BYTES = 1024 * 1024
CLOSE_WAIT_SECONDS = 5.0
"""How long a home may take to answer the caller's close frame with its own."""
GONE = 1011
"""The close code when the home goes away without closing (1006 may not be sent)."""
REQUEST_DROPPED = frozenset({
    b"host", b"connection", b"upgrade", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"content-length",
    b"proxy-authorization", b"proxy-authenticate", b"sec-websocket-key", b"sec-websocket-version",
    b"sec-websocket-protocol", b"sec-websocket-extensions", HEADER,
})  # fmt: skip
"""The handshake's own headers (wsproto writes them again; extensions are not offered:
they are one hop's) and the ones of one hop."""
ANSWER_DROPPED = frozenset({
    b"connection", b"upgrade", b"keep-alive", b"transfer-encoding", b"content-length", b"date", b"server",
    b"sec-websocket-accept", b"sec-websocket-protocol", b"sec-websocket-extensions",
})  # fmt: skip


class _HomeGone(Exception):
    """The home closed or broke the connection."""


async def forward_websocket(forwarder: Forwarder, scope: dict[str, Any], receive: Receive, send: Send, home: Home) -> None:
    """Serve the WebSocket `scope` by forwarding it to `home` (see the module)."""
    if (await receive())["type"] != "websocket.connect":
        return
    parts = urlsplit(home.url)
    try:
        with trio.fail_after(CONNECT_SECONDS):
            stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    except (OSError, trio.TooSlowError) as exc:
        log.warning("forwarding the WebSocket %s to node %s failed: %s", scope["path"], home.name, exc)
        await _refuse_unreachable(scope, send, home)
        return
    async with stream:
        relay = _Relay(stream, send)
        client = scope.get("client")
        headers = [(name, value) for name, value in scope["headers"] if name not in REQUEST_DROPPED]
        headers.append((HEADER, forwarder.sign(client[0] if client else "")))
        query = scope.get("query_string", b"")
        raw_path = scope.get("raw_path") or scope["path"].encode()
        target = (raw_path + (b"?" + query if query else b"")).decode("latin-1")
        host = next((value for name, value in scope["headers"] if name == b"host"), parts.netloc.encode()).decode("latin-1")
        try:
            await relay.write(Request(host=host, target=target, subprotocols=list(scope.get("subprotocols", [])), extra_headers=headers))
            with trio.fail_after(HANDSHAKE_SECONDS):
                accepted = await relay.handshake(scope)
        except (_HomeGone, trio.TooSlowError, RemoteProtocolError) as exc:
            log.warning("node %s did not answer the WebSocket %s: %s", home.name, scope["path"], exc)
            await _refuse_unreachable(scope, send, home)
            return
        if not accepted:
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.to_home, receive, nursery.cancel_scope)
            await relay.to_caller()
            nursery.cancel_scope.cancel()


class _Relay:
    """One forwarded WebSocket: wsproto's client to the home on `stream`, ASGI to the caller."""

    def __init__(self, stream: trio.SocketStream, send: Send) -> None:
        self.stream = stream
        self.send = send
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[Any] = []
        self.parts: list[str | bytes] = []
        self.size = 0
        self.ended = False
        self.writing = trio.Lock()
        """Both directions write to the home (messages; answers to its pings and close)."""

    async def write(self, event: Any) -> None:
        async with self.writing:  # frames go out in the order wsproto made them
            try:
                data = self.ws.send(event)
            except LocalProtocolError:  # the connection is closing already
                return
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise _HomeGone(str(exc)) from exc

    async def next_event(self) -> Any:
        while not self.events:
            if self.ended:
                raise _HomeGone("the connection ended")
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            self.ended = not data
            self.ws.receive_data(data or None)
            self.events.extend(self.ws.events())
        return self.events.pop(0)

    async def handshake(self, scope: dict[str, Any]) -> bool:
        """Relay the home's answer to the handshake: True once accepted."""
        event = await self.next_event()
        if isinstance(event, AcceptConnection):
            headers = [(bytes(n).lower(), bytes(v)) for n, v in event.extra_headers if bytes(n).lower() not in ANSWER_DROPPED]
            await self.send({"type": "websocket.accept", "subprotocol": event.subprotocol, "headers": headers})
            return True
        if not isinstance(event, RejectConnection):
            raise RemoteProtocolError(f"an unexpected answer to the handshake ({type(event).__name__})")
        body = b""
        finished = not event.has_body
        while not finished:
            data = await self.next_event()
            if not isinstance(data, RejectData):
                break
            body += data.data
            finished = data.body_finished or len(body) > MAX_REFUSAL_BYTES
        if "websocket.http.response" in scope.get("extensions", {}):
            headers = [(bytes(n).lower(), bytes(v)) for n, v in event.headers if bytes(n).lower() not in ANSWER_DROPPED]
            await self.send({"type": "websocket.http.response.start", "status": event.status_code, "headers": headers})
            await self.send({"type": "websocket.http.response.body", "body": body[:MAX_REFUSAL_BYTES]})
        else:
            await self.send({"type": "websocket.close", "code": 1008})
        return False

    async def to_caller(self) -> None:
        """The home's messages to the caller, until either side closes."""
        while True:
            try:
                event = await self.next_event()
            except (_HomeGone, RemoteProtocolError):
                await self.send({"type": "websocket.close", "code": GONE, "reason": "the node that hosts this resource went away"})
                return
            if isinstance(event, Message):
                self.parts.append(event.data)
                self.size += len(event.data)
                if self.size > MAX_MESSAGE_BYTES:
                    await self.write(CloseConnection(code=1009, reason="message too big"))
                    await self.send({"type": "websocket.close", "code": 1009, "reason": "message too big"})
                    return
                if event.message_finished:
                    if isinstance(event, TextMessage):
                        await self.send({"type": "websocket.send", "text": "".join(str(part) for part in self.parts)})
                    else:
                        await self.send({"type": "websocket.send", "bytes": b"".join(part for part in self.parts if isinstance(part, bytes | bytearray))})
                    self.parts, self.size = [], 0
            elif isinstance(event, Ping):
                await self.write(event.response())
            elif isinstance(event, CloseConnection):
                await self.write(event.response())
                await self.send({"type": "websocket.close", "code": event.code, "reason": event.reason or ""})
                return

    async def to_home(self, receive: Receive, done: trio.CancelScope) -> None:
        """The caller's messages to the home; its close (or its vanishing) ends the relay."""
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.receive":
                    if message.get("bytes") is not None:
                        await self.write(BytesMessage(data=message["bytes"]))
                    else:
                        await self.write(TextMessage(data=message.get("text") or ""))
                elif message["type"] == "websocket.disconnect":
                    code = int(message.get("code", 1000))
                    if code not in (1005, 1006, 1015):  # a close frame, passed on; else the connection just ends
                        await self.write(CloseConnection(code=code, reason=message.get("reason") or None))
                        await trio.sleep(CLOSE_WAIT_SECONDS)  # `to_caller` reads the home's answering close, and ends it all
                    done.cancel()
                    return
        except _HomeGone:
            return  # `to_caller` sees it too, and tells the caller


async def _refuse_unreachable(scope: dict[str, Any], send: Send, home: Home) -> None:
    message = f"the node that hosts this resource ({home.name}) cannot be reached; try again shortly"
    answer = error_answer(ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": "2"}), new_request_id())
    assert isinstance(answer, JsonAnswer)
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": answer.status_code, "headers": answer.raw_headers()})
        await send({"type": "websocket.http.response.body", "body": answer.body})
    else:
        await send({"type": "websocket.close", "code": 1013})


__all__ = ["forward_websocket"]
