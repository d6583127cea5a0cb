"""Every status line the project writes by hand, read by a strict client (issue 26).

Python's `websockets` refuses a status line without ` SP reason-phrase` (RFC 9112 4:
`HTTP-version SP status-code SP [reason-phrase]`): `HTTP/1.1 101` broke every Python
program opening a computer's terminal. Here each writer is read by websockets' own
parser (the one its client runs on a handshake answer and on a proxy's CONNECT
answer) or by its client itself: the guest agent's HTTP server, the preview router
(its own pages, and the apps' answers it relays, WebSocket upgrades included) and
the egress proxy (CONNECT, its refusals, relayed answers, 100-continue). Every line
also carries the standard reason phrase (`http.HTTPStatus`), also where the app
behind sent none. The terminal through a real computer is in
tests/http/test_computers_terminal.py.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from pathlib import Path

import pytest
import trio
from websockets.http11 import Response as WsResponse
from websockets.streams import StreamReader
from websockets.sync.client import connect

from corral.net.egress import DestinationPolicy
from corral.net.preview import Forward, PreviewRequest, PreviewRouter, Reply, RouteTable, Upstream
from corral.vm.agent import httpserver
from corral.vm.agent.errors import AgentError
from corral.vm.agent.websocket import WebSocket, WebSocketClosed, accept_key
from tests.net.test_egress_proxy import running_proxy

App = Callable[[trio.SocketStream], Awaitable[None]]


def strict_head(raw: bytes, reason: str | None = None) -> WsResponse:
    """The first head in `raw` as websockets' parser reads it, HTTP/1.1, with the
    standard reason phrase (or `reason`)."""
    head, blank, _ = raw.partition(b"\r\n\r\n")
    assert blank, f"no complete head in {raw[:200]!r}"
    reader = StreamReader()
    reader.feed_data(head + b"\r\n\r\n")
    reader.feed_eof()
    # proxy=True: the head alone (the parser a CONNECT answer goes through); HTTP/1.1 checked below.
    parser = WsResponse.parse(reader.read_line, reader.read_exact, reader.read_to_eof, proxy=True)
    try:
        next(parser)
    except StopIteration as done:
        response: WsResponse = done.value
    else:  # pragma: no cover - the parser wanted more bytes than a whole head
        raise AssertionError(f"the head did not parse: {head[:200]!r}")
    assert head.startswith(b"HTTP/1.1 "), head[:80]
    assert response.reason_phrase == (reason or HTTPStatus(response.status_code).phrase), head.split(b"\r\n", 1)[0]
    return response


async def exchange(port: int, request: bytes) -> bytes:
    """Send `request` on a new connection; what came back up to the first whole head."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        received = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in received:
                data = await stream.receive_some(65536)
                if not data:
                    break
                received += data
    return received


def websocket_echo(port: int, uri: str) -> tuple[int, str, bytes]:
    """Python's `websockets` client to `uri` over a connection to 127.0.0.1:`port`
    (what DNS would give for the URI's host): the handshake's status and reason, and
    the echo of one message. Run in a thread: the client is synchronous."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    with connect(uri, sock=sock, proxy=None, open_timeout=10, close_timeout=2) as ws:
        ws.send(b"ping")
        echoed = ws.recv(timeout=10)
        assert isinstance(echoed, bytes) and ws.response is not None
        return ws.response.status_code, ws.response.reason_phrase, echoed


@contextlib.asynccontextmanager
async def app_server(handler: App) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield int(listeners[0].socket.getsockname()[1])
        nursery.cancel_scope.cancel()


async def read_head(stream: trio.SocketStream, buffered: bytearray) -> bytes:
    while b"\r\n\r\n" not in buffered:
        data = await stream.receive_some(65536)
        if not data:
            return b""
        buffered += data
    end = buffered.index(b"\r\n\r\n") + 4
    head = bytes(buffered[:end])
    del buffered[:end]
    return head


async def echo_frames(ws: WebSocket) -> None:
    with contextlib.suppress(WebSocketClosed):
        while True:
            _, payload = await ws.receive()
            await ws.send_binary(payload)


# -- the guest agent ------------------------------------------------------------


async def _agent_handler(request: httpserver.Request) -> httpserver.Response:
    if request.path == "/ws":
        key = request.headers["sec-websocket-key"]

        async def echo(stream: trio.SocketStream, buffered: bytes) -> None:
            await echo_frames(WebSocket(stream, buffered))

        headers = {"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-accept": accept_key(key)}
        return httpserver.Response(101, headers=headers, upgraded=echo)
    if request.path == "/stream":
        async def writer(send: httpserver.Send) -> None:
            await send(b"chunk", final=True)

        return httpserver.Response(200, writer=writer)
    if request.path == "/missing":
        raise AgentError(404, "NOT_FOUND", "nothing here")
    if request.path == "/created":
        return httpserver.json_response({"ok": True}, 201)
    return httpserver.json_response({"ok": True})


@contextlib.asynccontextmanager
async def agent_server() -> AsyncIterator[int]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(httpserver.serve, listeners, _agent_handler)
        yield int(listeners[0].socket.getsockname()[1])
        nursery.cancel_scope.cancel()


async def test_the_guest_agents_status_lines_and_upgrade_read_strictly() -> None:
    async with agent_server() as port:
        for path, status in (("/", 200), ("/created", 201), ("/stream", 200), ("/missing", 404)):
            raw = await exchange(port, f"GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n".encode())
            assert strict_head(raw).status_code == status, raw[:80]
        answer = await trio.to_thread.run_sync(websocket_echo, port, "ws://agent.test/ws")
    assert answer == (101, "Switching Protocols", b"ping")


# -- the preview router ---------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def router_to(app_port: int) -> AsyncIterator[int]:
    gone = _closed_port()

    async def resolve(request: PreviewRequest, match: re.Match[str] | None) -> Forward | Reply:
        replies = {
            "page.test": Reply(200, b"hi", (), "text/plain"),
            "moved.test": Reply(302, b"", (("Location", "/elsewhere"),)),
            "same.test": Reply(304, b"", (("ETag", '"a"'),)),
            "refused.test": Reply(403, b"no", (), "text/plain"),
            "teapot.test": Reply(418, b"odd", (), "text/plain"),
        }
        if request.host in replies:
            return replies[request.host]
        if request.host == "boom.test":
            raise RuntimeError("the resolver broke")
        if request.host == "gone.test":
            return Forward(Upstream("127.0.0.1", gone, label="a test app"))
        return Forward(Upstream("127.0.0.1", app_port, label="a test app"))

    table = RouteTable()
    table.add_pattern("test", r"[a-z0-9.-]+\.test", resolve)
    router = PreviewRouter(table)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(router.serve, "127.0.0.1", 0)
        yield int(port)
        nursery.cancel_scope.cancel()


_APP_STATUS_LINES = {
    "/h11": b"HTTP/1.1 200 \r\n",  # what h11 writes when given no reason
    "/bare": b"HTTP/1.1 204\r\n",  # no SP at all: lenient parsers take it, the router mends it
    "/own": b"HTTP/1.1 200 Fine Thanks\r\n",  # an app's own phrase is kept
    "/unknown": b"HTTP/1.1 299 \r\n",  # a code HTTPStatus does not know: its class's phrase
}


async def _app(stream: trio.SocketStream) -> None:
    """Answers by path with the status lines above; `/ws` upgrades the way h11 writes
    a 101 (`HTTP/1.1 101 `), `/ws-bare` with no space at all, then echoes frames."""
    buffered = bytearray()
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while head := await read_head(stream, buffered):
            path = head.split(b" ", 2)[1].decode()
            if path.startswith("/ws"):
                key = re.search(rb"(?im)^sec-websocket-key:\s*(\S+)", head)
                assert key is not None
                line = b"HTTP/1.1 101 \r\n" if path == "/ws" else b"HTTP/1.1 101\r\n"
                await stream.send_all(
                    line + b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Accept: " + accept_key(key[1].decode()).encode() + b"\r\n\r\n"
                )
                await echo_frames(WebSocket(stream, bytes(buffered)))
                return
            if path == "/continue":
                await stream.send_all(b"HTTP/1.1 100 \r\n\r\n")
                length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head)[1])  # type: ignore[index]
                while len(buffered) < length:
                    buffered += await stream.receive_some(65536)
                del buffered[:length]
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                continue
            line = _APP_STATUS_LINES[path]
            body = b"" if line.startswith(b"HTTP/1.1 204") else b"ok"
            await stream.send_all(line + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"GET / HTTP/1.1\r\nHost: page.test\r\n\r\n", 200),
        (b"GET / HTTP/1.1\r\nHost: moved.test\r\n\r\n", 302),
        (b"GET / HTTP/1.1\r\nHost: same.test\r\n\r\n", 304),
        (b"GET / HTTP/1.1\r\nHost: refused.test\r\n\r\n", 403),
        (b"GET / HTTP/1.1\r\nHost: teapot.test\r\n\r\n", 418),
        (b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n", 404),
        (b"GET / HTTP/1.1\r\nHost: boom.test\r\n\r\n", 500),
        (b"GET / HTTP/1.1\r\nHost: gone.test\r\n\r\n", 502),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: page.test\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nHost: page.test\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    ],
)
async def test_the_preview_routers_own_answers_read_strictly(request_bytes: bytes, status: int) -> None:
    async with app_server(_app) as app, router_to(app) as port:
        raw = await exchange(port, request_bytes)
    assert strict_head(raw).status_code == status, raw[:80]


async def test_the_preview_router_mends_an_apps_missing_reason_phrase() -> None:
    async with app_server(_app) as app, router_to(app) as port:
        for path, status, reason in (
            ("/h11", 200, "OK"), ("/bare", 204, "No Content"), ("/own", 200, "Fine Thanks"), ("/unknown", 299, "Success"),
        ):
            raw = await exchange(port, f"GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n".encode())
            assert strict_head(raw, reason).status_code == status, raw[:80]
        interim = await exchange(
            port, b"POST /continue HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        )
        assert strict_head(interim).status_code == 100


@pytest.mark.parametrize("path", ["/ws", "/ws-bare"])
async def test_a_websocket_through_the_preview_router_opens_with_the_websockets_library(path: str) -> None:
    """The app answers its 101 as h11 writes it (`HTTP/1.1 101 `) or with no space at
    all; the client sees `HTTP/1.1 101 Switching Protocols` and the echo."""
    async with app_server(_app) as app, router_to(app) as port:
        answer = await trio.to_thread.run_sync(websocket_echo, port, f"ws://app.test{path}")
    assert answer == (101, "Switching Protocols", b"ping")


# -- the egress proxy -----------------------------------------------------------


async def _upstream(stream: trio.SocketStream) -> None:
    """A plain HTTP app answering as h11 does without a reason (`HTTP/1.1 200 `)."""
    buffered = bytearray()
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while head := await read_head(stream, buffered):
            if b"100-continue" in head.lower():
                length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head)[1])  # type: ignore[index]
                while len(buffered) < length:
                    buffered += await stream.receive_some(65536)
                del buffered[:length]
            await stream.send_all(b"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok")


async def test_the_egress_proxys_answers_read_strictly(tmp_path: Path) -> None:
    async with app_server(_upstream) as app, running_proxy(tmp_path) as proxy:
        port = proxy.bound_port
        assert port is not None
        target = f"127.0.0.1:{app}"
        # CONNECT, read by the parser websockets runs on a proxy's answer.
        tunnel = await exchange(port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert strict_head(tunnel, "Connection established").status_code == 200
        bad = await exchange(port, b"CONNECT 127.0.0.1:0 HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n")
        assert strict_head(bad).status_code == 400
        # A relayed answer whose reason the upstream left out gets the standard one.
        relayed = await exchange(port, f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert strict_head(relayed).status_code == 200
        interim = await exchange(
            port,
            f"POST http://{target}/ HTTP/1.1\r\nHost: {target}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n".encode(),
        )
        assert strict_head(interim).status_code == 100
    # Refusals: a destination the policy forbids, as CONNECT and as plain HTTP.
    async with running_proxy(tmp_path, destinations=DestinationPolicy()) as proxy:
        port = proxy.bound_port
        assert port is not None
        refused = await exchange(port, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
        assert strict_head(refused).status_code == 403
        refused = await exchange(port, b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert strict_head(refused).status_code == 403
