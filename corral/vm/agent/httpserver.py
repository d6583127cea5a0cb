"""A small HTTP/1.1 server on trio streams and h11.

The agent needs keep-alive (an exec round trip must cost a few milliseconds, not a
new TCP handshake), streamed chunked responses (exec output, process logs), the
upgrade of a connection to a WebSocket (terminals) and nothing else, so this is hand-rolled instead of pulling a framework into every
instance.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import h11
import trio

from .errors import AgentError

MAX_BODY = 64 * 1024 * 1024
READ_SIZE = 65536
HEAD_FLUSH_AFTER = 0.5  # seconds a streamed response may hold its head back


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        if not self.body:
            return {}
        try:
            value = json.loads(self.body)
        except ValueError as exc:
            raise AgentError(400, "INVALID_BODY", "request body is not valid JSON") from exc
        if not isinstance(value, dict):
            raise AgentError(400, "INVALID_BODY", "request body must be a JSON object")
        return value


class Send(Protocol):
    """Sends one chunk; `final=True` ends the body in the same write."""

    async def __call__(self, chunk: bytes, final: bool = False) -> None: ...


Writer = Callable[[Send], Awaitable[None]]
Upgraded = Callable[[trio.SocketStream, bytes], Awaitable[None]]
"""Takes over the connection after a 101, with the bytes already read past the request."""


@dataclass
class Response:
    """A whole body, or a `writer` that streams chunks through the `send` it is given.

    A writer (instead of an async generator) keeps nurseries out of generators, which
    trio forbids for good reasons.
    """

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    writer: Writer | None = None
    upgraded: Upgraded | None = None
    """For a 101: what speaks the new protocol on the connection (a WebSocket)."""


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(value).encode(), {"content-type": "application/json"})


def error_response(error: AgentError) -> Response:
    return json_response({"error": {"code": error.code, "message": error.message}}, error.status)


Handler = Callable[[Request], Awaitable[Response]]


def reason(status: int) -> bytes:
    """The reason phrase of a status line: h11 writes none unless given one, and a
    status line with a phrase reads the same to every client, strict or not."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Connection:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)

    async def next_event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(READ_SIZE)
                self.conn.receive_data(data)
                continue
            return event

    async def send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send_all(data)


async def _read_request(conn: _Connection, head: h11.Request) -> Request:
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await conn.next_event()
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_BODY:
                raise AgentError(413, "FILE_TOO_LARGE", "request body too large")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            break
        elif isinstance(event, h11.ConnectionClosed):
            raise trio.BrokenResourceError("client went away")
    target = urlsplit(head.target.decode("latin-1"))
    query = {k: v[-1] for k, v in parse_qs(target.query, keep_blank_values=True).items()}
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
    return Request(head.method.decode(), target.path, query, headers, b"".join(chunks))


async def _send_response(conn: _Connection, response: Response) -> None:
    headers = [(k.encode(), v.encode("latin-1")) for k, v in response.headers.items()]
    if response.upgraded is not None:
        await conn.send(h11.InformationalResponse(status_code=101, headers=headers, reason=reason(101)))
        trailing, _ = conn.conn.trailing_data
        await response.upgraded(conn.stream, bytes(trailing))
        return
    if response.writer is not None:
        await _send_streamed(conn, response.status, headers, response.writer)
        return
    headers.append((b"content-length", str(len(response.body)).encode()))
    await conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason(response.status)))
    if response.body:
        await conn.send(h11.Data(data=response.body))
    await conn.send(h11.EndOfMessage())


async def _send_streamed(conn: _Connection, status: int, headers: list[tuple[bytes, bytes]], writer: Writer) -> None:
    """A chunked body from `writer`.

    The head waits for the first chunk and the last chunk carries the end of the
    body: one write (one packet, one wake-up) for a short exec. A writer that has
    nothing to say yet (a command that prints nothing for minutes, a quiet process)
    still gets its head out after `HEAD_FLUSH_AFTER`, so the client's "the agent
    does not answer" deadline measures the agent, never the command.
    """
    headers = [*headers, (b"transfer-encoding", b"chunked")]
    pending = conn.conn.send(h11.Response(status_code=status, headers=headers, reason=reason(status))) or b""
    ended = False
    lock = trio.Lock()  # the writer and the head flush share one stream

    async def send(chunk: bytes, final: bool = False) -> None:
        nonlocal pending, ended
        async with lock:
            data = pending + (conn.conn.send(h11.Data(data=chunk)) or b"" if chunk else b"")
            pending = b""
            if final:
                data += conn.conn.send(h11.EndOfMessage()) or b""
                ended = True
            if data:
                await conn.stream.send_all(data)

    async def flush_head_later() -> None:
        nonlocal pending
        await trio.sleep(HEAD_FLUSH_AFTER)
        async with lock:
            data, pending = pending, b""
            if data:
                await conn.stream.send_all(data)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flush_head_later)
            await writer(send)
            if not ended:
                await send(b"", final=True)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery wraps what a task raised; the caller expects it as it is (a client
        # that went away is BrokenResourceError, not a group the server loop cannot catch).
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def serve_connection(stream: trio.SocketStream, handler: Handler) -> None:
    """Answer requests on one connection until the client closes it."""
    conn = _Connection(stream)
    try:
        while True:
            event = await conn.next_event()
            if isinstance(event, h11.ConnectionClosed):
                return
            if not isinstance(event, h11.Request):
                return
            try:
                request = await _read_request(conn, event)
                response = await handler(request)
            except AgentError as exc:
                response = error_response(exc)
            await _send_response(conn, response)
            if response.upgraded is not None:
                return
            if conn.conn.our_state is h11.MUST_CLOSE or conn.conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, ConnectionError):
        return
    except Exception:  # one connection's failure must never take the whole agent down
        traceback.print_exc()
        return
    finally:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await stream.aclose()


async def serve(listeners: list[trio.SocketListener], handler: Handler) -> None:
    async def on_connection(stream: trio.SocketStream) -> None:
        await serve_connection(stream, handler)

    await trio.serve_listeners(on_connection, listeners)
