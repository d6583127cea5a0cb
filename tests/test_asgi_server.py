"""The API's HTTP/1.1 server against strict standard clients: h11's own client state
machine (which refuses any framing error), httpx, and trio-websocket (wsproto).

Each test serves a small ASGI application on a free port and speaks to it over real
loopback TCP.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx
import pytest
import trio
import trio_websocket

from corral import asgi_server
from corral.asgi_server import ServerConfig, serve
from tests.support import free_port

Message = dict[str, Any]


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with what it saw; a few paths behave specially."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                LIFESPAN.append("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await websocket_app(scope, receive, send)
        return
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for n in range(3):
            await send({"type": "http.response.body", "body": b"chunk %d\n" % n, "more_body": True})
            await trio.sleep(0.05)
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/follow":  # streams until the client leaves, as SSE does
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        DISCONNECTS.append(path)
        return
    if path == "/early":  # answers without reading the body
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})
        return
    if path == "/fail":
        raise RuntimeError("the application broke")
    if path == "/whole":  # says whether the body was handed over with the scope
        whole = scope["extensions"].get("corral.whole_body")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"none" if whole is None else bytes(whole)})
        return
    if path == "/slow":
        await trio.sleep(0.5)
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    answer = b"%s %s q=%s len=%d" % (scope["method"].encode(), scope["raw_path"], scope["query_string"], len(body))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": answer})


async def websocket_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert (await receive())["type"] == "websocket.connect"
    if scope["path"] == "/ws/refuse":
        await send({"type": "websocket.close", "code": 1008})
        return
    if scope["path"] == "/ws/deny":
        await send({"type": "websocket.http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "websocket.http.response.body", "body": b'{"error":"no"}'})
        return
    await send({"type": "websocket.accept", "subprotocol": scope["subprotocols"][0] if scope["subprotocols"] else None})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            DISCONNECTS.append(f"ws {message['code']}")
            return
        if message.get("text") == "close":
            await send({"type": "websocket.close", "code": 4001, "reason": "asked to"})
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"].upper()})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"][::-1]})


LIFESPAN: list[str] = []
DISCONNECTS: list[str] = []


@contextlib.asynccontextmanager
async def served(**config: Any) -> AsyncIterator[tuple[int, trio.Event]]:
    port = free_port()
    stop = trio.Event()
    LIFESPAN.clear()
    DISCONNECTS.clear()
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: serve(echo_app, ServerConfig("127.0.0.1", port, **config),
                                                      shutdown_trigger=stop.wait, task_status=task_status))
        try:
            yield port, stop
        finally:
            stop.set()


class StrictClient:
    """h11's client side on a raw stream: every byte the server sends is checked."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def send(self, *events: Any) -> None:
        await self.stream.send_all(b"".join(self.h11.send(event) or b"" for event in events))

    async def next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some(65536))
                continue
            return event

    async def response(self) -> tuple[h11.Response, bytes]:
        head = await self.next_event()
        assert isinstance(head, h11.Response), head
        body = b""
        while True:
            event = await self.next_event()
            if isinstance(event, h11.EndOfMessage):
                return head, body
            assert isinstance(event, h11.Data), event
            body += event.data


def header(response: h11.Response, name: bytes) -> bytes | None:
    return next((value for key, value in response.headers if key == name), None)


async def test_keep_alive_answers_with_length_and_date_to_a_strict_client() -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        for n in range(3):
            body = b"x" * n
            await client.send(h11.Request(method="POST", target=f"/echo%20it?n={n}",
                                          headers=[("Host", "t"), ("Content-Length", str(len(body)))]),
                              h11.Data(data=body), h11.EndOfMessage())
            head, answer = await client.response()
            assert head.status_code == 200
            assert answer == b"POST /echo%%20it q=n=%d len=%d" % (n, n)
            assert header(head, b"content-length") == str(len(answer)).encode()
            assert header(head, b"date") is not None
            client.h11.start_next_cycle()


async def test_a_streamed_answer_is_chunked_and_arrives_in_pieces() -> None:
    async with served() as (port, _), httpx.AsyncClient() as client:
        async with client.stream("GET", f"http://127.0.0.1:{port}/stream") as response:
            assert response.headers["transfer-encoding"] == "chunked"
            pieces = [piece async for piece in response.aiter_raw()]
        assert b"".join(pieces) == b"chunk 0\nchunk 1\nchunk 2\n"
        assert len(pieces) >= 3


async def test_expect_100_continue_is_answered_when_the_body_is_asked_for() -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        body = b"y" * 100_000
        await client.send(h11.Request(method="PUT", target="/upload",
                                      headers=[("Host", "t"), ("Content-Length", str(len(body))), ("Expect", "100-continue")]))
        with trio.fail_after(5):
            informational = await client.next_event()
        assert isinstance(informational, h11.InformationalResponse) and informational.status_code == 100
        await client.send(h11.Data(data=body), h11.EndOfMessage())
        head, answer = await client.response()
        assert head.status_code == 200 and answer.endswith(b"len=100000")


async def test_a_small_body_written_after_its_head_is_handed_over_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """As httpx sends a JSON body: the head, then the body in a write of its own. The
    application gets it in the scope; not when the client waits for `100 Continue`,
    nor when it is larger than `EAGER_BODY_BYTES` or stalls past `EAGER_BODY_SECONDS`."""
    monkeypatch.setattr(asgi_server, "EAGER_BODY_SECONDS", 0.5)
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        cases: list[tuple[bytes, list[tuple[str, str]], float, bytes]] = [
            (b'{"command": "true"}', [], 0.05, b'{"command": "true"}'),
            (b"x" * asgi_server.EAGER_BODY_BYTES, [], 0.05, b"x" * asgi_server.EAGER_BODY_BYTES),
            (b"x" * (asgi_server.EAGER_BODY_BYTES + 1), [], 0.05, b"none"),
            (b"late", [], 0.8, b"none"),
        ]
        for body, extra, pause, expected in cases:
            await client.send(h11.Request(method="POST", target="/whole",
                                          headers=[("Host", "t"), ("Content-Length", str(len(body))), *extra]))
            await trio.sleep(pause)
            await client.send(h11.Data(data=body), h11.EndOfMessage())
            with trio.fail_after(5):
                head, answer = await client.response()
            assert head.status_code == 200 and answer == expected, (len(body), pause, answer[:20])
            client.h11.start_next_cycle()
        await client.send(h11.Request(method="POST", target="/whole",
                                      headers=[("Host", "t"), ("Content-Length", "4"), ("Expect", "100-continue")]))
        with trio.fail_after(0.4):  # answered at once: it was not waited for
            head, answer = await client.response()
        assert answer == b"none"


async def test_head_answers_carry_no_body() -> None:
    async with served() as (port, _), httpx.AsyncClient() as client:
        response = await client.head(f"http://127.0.0.1:{port}/thing")
        assert response.status_code == 200 and response.content == b""
        assert (await client.get(f"http://127.0.0.1:{port}/after")).text == "GET /after q= len=0"  # same connection still good


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\nGET /second HTTP/1.1\r\nHost: t\r\n\r\n")
        data = b""
        with trio.fail_after(5):
            while data.count(b"HTTP/1.1 200 ") < 2 or not data.endswith(b"len=0"):
                data += await stream.receive_some(65536)
        assert data.index(b"GET /slow q= len=0") < data.index(b"GET /second q= len=0")


async def test_an_early_answer_keeps_the_connection_once_the_body_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        await client.send(h11.Request(method="POST", target="/early", headers=[("Host", "t"), ("Content-Length", "5")]))
        with trio.fail_after(5):
            head, _ = await client.response()  # before the body was sent
        assert head.status_code == 401 and header(head, b"connection") is None
        await client.send(h11.Data(data=b"late!"), h11.EndOfMessage())
        client.h11.start_next_cycle()
        await client.send(h11.Request(method="GET", target="/next", headers=[("Host", "t")]), h11.EndOfMessage())
        with trio.fail_after(5):
            head, answer = await client.response()
        assert head.status_code == 200 and answer.startswith(b"GET /next")


async def test_an_early_answer_to_a_body_past_the_limit_closes() -> None:
    async with served(max_body_bytes=1000) as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        await client.send(h11.Request(method="POST", target="/early", headers=[("Host", "t"), ("Content-Length", "5000")]))
        with trio.fail_after(5):
            head, _ = await client.response()
            assert header(head, b"connection") == b"close"
            assert await stream.receive_some(100) == b""


async def test_an_early_answer_whose_body_never_comes_closes_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asgi_server, "DRAIN_SECONDS", 0.3)
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = StrictClient(stream)
        await client.send(h11.Request(method="POST", target="/early", headers=[("Host", "t"), ("Content-Length", "5")]))
        with trio.fail_after(5):
            head, _ = await client.response()
            assert head.status_code == 401
            assert await stream.receive_some(100) == b""


async def test_a_malformed_request_gets_400_and_a_close() -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
        with trio.fail_after(5):
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 400 ")


async def test_a_head_past_the_size_limit_is_refused() -> None:
    async with served() as (port, _), await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (2 * asgi_server.MAX_HEAD_BYTES) + b"\r\n\r\n")
        with trio.fail_after(5):
            data = b""
            with contextlib.suppress(trio.BrokenResourceError):
                while chunk := await stream.receive_some(65536):
                    data += chunk
        assert data.startswith(b"HTTP/1.1 400 ")


async def test_an_application_error_is_a_500() -> None:
    async with served() as (port, _), httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/fail")
        assert response.status_code == 500


async def test_the_application_learns_that_the_client_left() -> None:
    async with served() as (port, _):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            client = StrictClient(stream)
            await client.send(h11.Request(method="GET", target="/follow", headers=[("Host", "t")]), h11.EndOfMessage())
            head = await client.next_event()
            assert head.status_code == 200
        with trio.fail_after(5):
            while not DISCONNECTS:
                await trio.sleep(0.01)
        assert DISCONNECTS == ["/follow"]


async def test_a_stop_closes_idle_connections_and_lets_requests_in_flight_finish() -> None:
    async with served() as (port, stop):
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        busy = await trio.open_tcp_stream("127.0.0.1", port)
        await busy.send_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        await trio.sleep(0.1)
        stop.set()
        with trio.fail_after(5):
            assert await idle.receive_some(100) == b""
            _, answer = await StrictClient(busy).response()
        assert answer.startswith(b"GET /slow")
        with trio.fail_after(5):
            while "shutdown" not in LIFESPAN:
                await trio.sleep(0.01)
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)
        await idle.aclose()
        await busy.aclose()


async def test_websocket_echo_with_subprotocol_and_close_code() -> None:
    async with served() as (port, _), trio_websocket.open_websocket("127.0.0.1", port, "/ws/echo", use_ssl=False, subprotocols=["rfb"]) as ws:
        assert ws.subprotocol == "rfb"
        await ws.send_message("hello")
        assert await ws.get_message() == "HELLO"
        await ws.send_message(b"\x01\x02\x03" * 50_000)
        assert await ws.get_message() == b"\x03\x02\x01" * 50_000
        await ws.send_message("close")
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
        assert closed.value.reason.code == 4001


async def test_websocket_client_close_reaches_the_application() -> None:
    async with served() as (port, _):
        async with trio_websocket.open_websocket("127.0.0.1", port, "/ws/echo", use_ssl=False) as ws:
            await ws.send_message("x")
            await ws.get_message()
        with trio.fail_after(5):
            while not DISCONNECTS:
                await trio.sleep(0.01)
        assert DISCONNECTS == ["ws 1000"]


async def test_websocket_refused_before_accept_is_403_and_denial_is_its_response() -> None:
    async with served() as (port, _):
        with pytest.raises(trio_websocket.ConnectionRejected) as refused:
            async with trio_websocket.open_websocket("127.0.0.1", port, "/ws/refuse", use_ssl=False):
                pass
        assert refused.value.status_code == 403
        with pytest.raises(trio_websocket.ConnectionRejected) as denied:
            async with trio_websocket.open_websocket("127.0.0.1", port, "/ws/deny", use_ssl=False):
                pass
        assert denied.value.status_code == 401 and denied.value.body == b'{"error":"no"}'
