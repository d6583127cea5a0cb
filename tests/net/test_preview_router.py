"""The preview router against real local apps: streaming, keep-alive, upgrades, refusals.

The apps here are small trio servers on loopback that say exactly what each test
needs (a slow chunked answer, a close-delimited one, a 100-continue, an echo
tunnel), so the router's relaying is checked byte by byte. Tests through real
sandboxes are in tests/http/test_previews_runtime.py.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trio

from corral.net.preview import Forward, PreviewRequest, PreviewRouter, Reply, RouteTable, Upstream
from corral.net.preview.http1 import Buffered, send_all

App = Callable[[trio.SocketStream], Awaitable[None]]


@contextlib.asynccontextmanager
async def app_server(handler: App) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield int(listeners[0].socket.getsockname()[1])
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def router_to(port: int, seen: list[PreviewRequest] | None = None, **forward: object) -> AsyncIterator[int]:
    async def resolve(request: PreviewRequest, match: re.Match[str] | None) -> Forward | Reply:
        if seen is not None:
            seen.append(request)
        if request.host == "boom.test":
            raise RuntimeError("the resolver broke")
        if request.host == "refused.test":
            return Reply(403, b"no", (("X-Why", "test"),), "text/plain")
        return Forward(Upstream("127.0.0.1", port, label=f"test app {port}"), **forward)  # type: ignore[arg-type]

    table = RouteTable()
    table.add_pattern("test", r"[a-z0-9.-]+\.test", resolve)
    router = PreviewRouter(table, scheme="https")
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(router.serve, "127.0.0.1", 0)
        yield int(bound)
        nursery.cancel_scope.cancel()


async def read_request(stream: trio.SocketStream, buffered: bytearray) -> bytes:
    """One request head (and a Content-Length body) from `stream`; b"" at EOF."""
    while b"\r\n\r\n" not in buffered:
        data = await stream.receive_some(65536)
        if not data:
            return b""
        buffered += data
    end = buffered.index(b"\r\n\r\n") + 4
    head = bytes(buffered[:end])
    del buffered[:end]
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    want = int(length[1]) if length else 0
    while len(buffered) < want:
        buffered += await stream.receive_some(65536)
    body = bytes(buffered[:want])
    del buffered[:want]
    return head + body


async def echo_app(stream: trio.SocketStream) -> None:
    """Answers every request on the connection with its own head and body."""
    buffered = bytearray()
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while True:
            request = await read_request(stream, buffered)
            if not request:
                return
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                                  b"Content-Length: %d\r\n\r\n%s" % (len(request), request))


def client(port: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10)


async def test_forwards_with_forwarded_headers_and_without_hop_by_hop_ones() -> None:
    async with app_server(echo_app) as app, router_to(app) as port, client(port) as http:
        response = await http.get(
            "/path?q=1",
            headers={"Host": "app.test:8081", "X-Forwarded-For": "203.0.113.9", "Keep-Alive": "timeout=1", "X-Custom": "yes"},
        )
    assert response.status_code == 200
    seen = response.text
    assert seen.startswith("GET /path?q=1 HTTP/1.1\r\n")
    assert "Host: app.test:8081\r\n" in seen and "X-Custom: yes\r\n" in seen
    assert "X-Forwarded-For: 203.0.113.9, 127.0.0.1\r\n" in seen
    assert "X-Forwarded-Proto: https\r\n" in seen and "X-Forwarded-Host: app.test:8081\r\n" in seen
    assert "keep-alive" not in seen.lower()
    assert "keep-alive" not in response.headers.get("connection", "") and "keep-alive" not in response.headers


async def test_the_edge_header_never_reaches_an_app() -> None:
    """`X-Corral-Edge` (the TLS edge's secret for the router) is dropped on every route."""
    async with app_server(echo_app) as app, router_to(app) as port, client(port) as http:
        response = await http.get("/", headers={"Host": "app.test", "X-Corral-Edge": "the-secret", "x-corral-edge": "again"})
    assert response.status_code == 200
    assert "corral-edge" not in response.text.lower() and "the-secret" not in response.text


async def test_keeps_client_and_app_connections_alive_and_honours_pipelining() -> None:
    connections = 0

    async def counting(stream: trio.SocketStream) -> None:
        nonlocal connections
        connections += 1
        await echo_app(stream)

    async with app_server(counting) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        # Two requests in one write, the first with a body: the router must find where each ends.
        await stream.send_all(
            b"POST /one HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /two HTTP/1.1\r\nHost: a.test\r\n\r\n"
        )
        received = b""
        with trio.fail_after(5):
            while received.count(b"HTTP/1.1 200") < 2 or not received.rstrip().endswith(b"a.test"):
                received += await stream.receive_some(65536)
                if b"GET /two" in received and received.endswith(b"\r\n\r\n"):
                    break
        await stream.aclose()
    assert b"POST /one HTTP/1.1" in received and b"\r\n\r\nhello" in received and b"GET /two HTTP/1.1" in received
    assert connections == 1


async def test_slow_chunked_response_arrives_chunk_by_chunk() -> None:
    release = trio.Event()

    async def slow(stream: trio.SocketStream) -> None:
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n")
        await stream.send_all(b"5\r\nfirst\r\n")
        await release.wait()
        await stream.send_all(b"6\r\nsecond\r\n0\r\n\r\n")

    async with (
        app_server(slow) as app,
        router_to(app) as port,
        client(port) as http,
        http.stream("GET", "/", headers={"Host": "s.test"}) as response,
    ):
        chunks = response.aiter_raw()
        with trio.fail_after(5):
            first = await chunks.__anext__()  # arrives while the app still holds back the rest
        assert first == b"first"
        release.set()
        rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"second"


async def test_request_body_streams_to_the_app_before_it_is_complete() -> None:
    got_first_part = trio.Event()

    async def reader(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        while b"\r\n\r\n" not in buffered:
            buffered += await stream.receive_some(65536)
        while b"part-one" not in buffered:
            buffered += await stream.receive_some(65536)
        got_first_part.set()
        while not buffered.endswith(b"0\r\n\r\n"):
            buffered += await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")

    async with app_server(reader) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"PUT /upload HTTP/1.1\r\nHost: u.test\r\nTransfer-Encoding: chunked\r\n\r\n8\r\npart-one\r\n")
        with trio.fail_after(5):
            await got_first_part.wait()  # the router relayed the first chunk on its own
        await stream.send_all(b"8\r\npart-two\r\n0\r\n\r\n")
        answer = b""
        with trio.fail_after(5):
            while not answer.endswith(b"ok"):
                answer += await stream.receive_some(65536)
        await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 201 Created") and answer.endswith(b"ok")


async def test_expect_100_continue_is_relayed() -> None:
    async def continuing(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        while b"\r\n\r\n" not in buffered:
            buffered += await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
        while not buffered.endswith(b"data"):
            buffered += await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")

    async with app_server(continuing) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"POST / HTTP/1.1\r\nHost: c.test\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        with trio.fail_after(5):
            interim = await stream.receive_some(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        await stream.send_all(b"data")
        received = b""
        with trio.fail_after(5):
            while not received.endswith(b"done"):
                received += await stream.receive_some(65536)
        await stream.aclose()
    assert b"200 OK" in received


async def test_close_delimited_response_closes_the_client_connection() -> None:
    async def old_style(stream: trio.SocketStream) -> None:
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
        await stream.aclose()

    async with app_server(old_style) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: o.test\r\n\r\n")
        received = b""
        with trio.fail_after(5):
            while data := await stream.receive_some(65536):
                received += data
    assert received.endswith(b"\r\n\r\nuntil the end")
    assert b"Connection: close" in received


async def test_app_closing_between_requests_is_retried_on_a_new_connection() -> None:
    served = 0

    async def one_shot(stream: trio.SocketStream) -> None:
        nonlocal served
        await read_request(stream, bytearray())
        served += 1
        # claims keep-alive, then closes anyway
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await stream.aclose()

    async with app_server(one_shot) as app, router_to(app) as port, client(port) as http:
        for _ in range(3):
            response = await http.get("/", headers={"Host": "r.test"})
            assert response.status_code == 200 and response.text == "ok"
    assert served == 3


async def test_websocket_upgrade_becomes_a_tunnel() -> None:
    async def upgrade(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        request = await read_request(stream, buffered)
        assert b"Upgrade: websocket" in request and b"Connection: Upgrade" in request
        await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        if buffered:
            await stream.send_all(b"echo:" + bytes(buffered))
        while data := await stream.receive_some(65536):
            await stream.send_all(b"echo:" + data)

    async with app_server(upgrade) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(
            b"GET /ws HTTP/1.1\r\nHost: w.test\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        received = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in received:
                received += await stream.receive_some(65536)
        assert received.startswith(b"HTTP/1.1 101") and b"Upgrade: websocket" in received
        for word in (b"ping", b"pong"):
            await stream.send_all(word)
            with trio.fail_after(5):
                assert await stream.receive_some(65536) == b"echo:" + word
        await stream.aclose()


async def test_nothing_listening_is_a_readable_502_page() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    async with router_to(closed_port) as port, client(port) as http:
        response = await http.get("/", headers={"Host": "gone.test"})
        again = await http.get("/", headers={"Host": "gone.test"})  # the connection stays usable
    assert response.status_code == 502 and again.status_code == 502
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["x-corral-preview-error"] == "not_listening"
    assert "Nothing is listening yet" in response.text and str(closed_port) in response.text


async def test_resolver_replies_and_unknown_hosts() -> None:
    async with app_server(echo_app) as app, router_to(app) as port, client(port) as http:
        refused = await http.get("/", headers={"Host": "refused.test"})
        unknown = await http.get("/", headers={"Host": "example.org"})
    assert refused.status_code == 403 and refused.text == "no" and refused.headers["x-why"] == "test"
    assert unknown.status_code == 404 and "No preview lives at this address" in unknown.text


async def test_healthz_answers_for_the_router_and_belongs_to_a_preview_on_its_host() -> None:
    """A load balancer checks the router at its address (`GET /healthz`, no preview's
    host): 200 `ok`. On a preview's host the path is the app's, forwarded as any other."""
    async with app_server(echo_app) as app, router_to(app) as port, client(port) as http:
        checked = await http.get("/healthz", headers={"Host": f"127.0.0.1:{port}"})
        headed = await http.head("/healthz", headers={"Host": "10.0.0.5"})
        other_path = await http.get("/health", headers={"Host": "10.0.0.5"})
        the_apps = await http.get("/healthz", headers={"Host": "app.test"})
    assert (checked.status_code, checked.text, checked.headers["cache-control"]) == (200, "ok\n", "no-store")
    assert headed.status_code == 200
    assert other_path.status_code == 404 and other_path.headers["x-corral-preview-error"] == "no_route"
    assert the_apps.status_code == 200 and "x-corral-preview-error" not in the_apps.headers and the_apps.text.strip() != "ok"


async def test_a_failing_resolver_is_a_500_page_not_a_dropped_connection() -> None:
    async with app_server(echo_app) as app, router_to(app) as port, client(port) as http:
        response = await http.get("/", headers={"Host": "boom.test"})
    assert response.status_code == 500 and response.headers["x-corral-preview-error"] == "router_error"


async def test_rewrites_target_drops_headers_cookies_and_adds_response_headers() -> None:
    async with app_server(echo_app) as app, router_to(
        app,
        target="/clean?keep=1",
        drop_headers=frozenset({"x-secret"}),
        drop_cookies=frozenset({"corral_preview"}),
        response_headers=(("Set-Cookie", "corral_preview=x; HttpOnly"),),
    ) as port, client(port) as http:
        response = await http.get(
            "/dirty?keep=1&token=2", headers={"Host": "t.test", "X-Secret": "s", "Cookie": "a=1; corral_preview=tok; b=2"}
        )
    seen = response.text
    assert seen.startswith("GET /clean?keep=1 HTTP/1.1")
    assert "x-secret" not in seen.lower() and "tok" not in seen and "Cookie: a=1; b=2" in seen
    assert response.headers["set-cookie"] == "corral_preview=x; HttpOnly"


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: a.test\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nBad Header: x\r\n\r\n", 400),
    ],
)
async def test_ambiguous_or_malformed_requests_are_refused(raw: bytes, status: int) -> None:
    async with app_server(echo_app) as app, router_to(app) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(raw)
        received = b""
        with trio.fail_after(5):
            while data := await stream.receive_some(65536):
                received += data
    assert received.startswith(b"HTTP/1.1 %d" % status), received[:80]


async def test_head_and_no_content_responses_have_no_body() -> None:
    async def bodiless(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        while request := await read_request(stream, buffered):
            if request.startswith(b"HEAD"):
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            else:
                await stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with app_server(bodiless) as app, router_to(app) as port, client(port) as http:
        head = await http.head("/", headers={"Host": "h.test"})
        empty = await http.delete("/", headers={"Host": "h.test"})
        head_again = await http.head("/", headers={"Host": "h.test"})
    assert head.status_code == 200 and head.headers["content-length"] == "1000"
    assert empty.status_code == 204 and head_again.status_code == 200


async def test_added_latency_is_small() -> None:
    """A sanity bound (the benchmark measures properly): well under 2 ms a request at p50."""
    async with app_server(echo_app) as app, router_to(app) as port:
        async def timings(target_port: int, host: bytes) -> list[float]:
            stream = await trio.open_tcp_stream("127.0.0.1", target_port)
            buffered = Buffered(stream.socket)
            out = []
            for _ in range(300):
                start = time.perf_counter()
                await send_all(stream.socket, b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
                head = await buffered.read_head()
                assert head is not None
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                while len(buffered.buf) < length:
                    await buffered.fill()
                buffered.take(length)
                out.append(time.perf_counter() - start)
            await stream.aclose()
            return sorted(out)

        direct = await timings(app, b"l.test")
        routed = await timings(port, b"l.test")
    added_ms = (routed[len(routed) // 2] - direct[len(direct) // 2]) * 1000
    print(f"router adds {added_ms:.3f} ms at p50")
    assert added_ms < 2.0, f"router adds {added_ms:.3f} ms at p50"


async def test_an_app_sets_cookies_for_its_own_host_only() -> None:
    """Previews of every tenant are hosts under one parent domain: a cookie an app sets
    for that parent (or for another host) would reach every other tenant's preview in
    the visitor's browser, and one named as the router's own would stand in for the
    visitor's token. Those are dropped; the app's own cookies pass as they were."""
    set_cookies = [
        "plain=1; Path=/",
        "own=2; Domain=3000-app.test; HttpOnly",
        "own-dot=3; domain=.3000-APP.test",
        "parent=4; Domain=test; Path=/",
        "sibling=5; Path=/; Domain=3000-other.test",
        "corral_preview=forged; Path=/",
    ]

    async def cookie_app(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        await read_request(stream, buffered)
        head = "".join(f"Set-Cookie: {value}\r\n" for value in set_cookies)
        await stream.send_all(f"HTTP/1.1 200 OK\r\n{head}Content-Length: 2\r\nConnection: close\r\n\r\nok".encode())

    async with app_server(cookie_app) as app, router_to(app, drop_cookies=frozenset({"corral_preview"})) as port, client(port) as http:
        response = await http.get("/", headers={"Host": "3000-app.test"})
    assert response.status_code == 200 and response.text == "ok"
    assert response.headers.get_list("set-cookie") == set_cookies[:3]


async def test_on_a_tenants_own_domain_its_app_may_set_cookies_for_the_parents() -> None:
    """A custom domain is the tenant's, and so are its parents: `Domain=example.test`
    from `app.example.test` is the app sharing a session across its own hosts. A
    cookie for a domain that is not a parent, or for a bare top-level name, is still
    dropped (browsers would too)."""
    set_cookies = ["parent=1; Domain=example.test", "own=2; Domain=app.example.test", "other=3; Domain=elsewhere.test", "tld=4; Domain=test"]

    async def cookie_app(stream: trio.SocketStream) -> None:
        buffered = bytearray()
        await read_request(stream, buffered)
        head = "".join(f"Set-Cookie: {value}\r\n" for value in set_cookies)
        await stream.send_all(f"HTTP/1.1 200 OK\r\n{head}Content-Length: 2\r\nConnection: close\r\n\r\nok".encode())

    async with app_server(cookie_app) as app, router_to(app, own_domain=True) as port, client(port) as http:
        response = await http.get("/", headers={"Host": "app.example.test"})
    assert response.headers.get_list("set-cookie") == set_cookies[:2]
