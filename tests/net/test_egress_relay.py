"""Bodies through the egress proxy's fast relay: exact bytes at every size, kept-alive
connections on both sides, and upstreams that lie about a body's length."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from corral.net.egress.proxy import SPLICE_BYTES
from tests.net.egress_support import Recording, echo_server
from tests.net.test_egress_proxy import client, running_proxy, upstream_tls

SIZES = (0, 1, 65536, SPLICE_BYTES - 1, SPLICE_BYTES + 1, 5 * 1024 * 1024 + 3)


async def test_every_size_arrives_whole_over_one_connection_each_side(tmp_path: Path) -> None:
    tls, bundle = upstream_tls(tmp_path)
    hooks = Recording()
    async with (
        echo_server() as plain,
        echo_server(tls=tls) as secure,
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        for base in (f"http://127.0.0.1:{plain.port}", f"https://127.0.0.1:{secure.port}"):
            for size in SIZES:
                response = await http.get(f"{base}/big/{size}")
                assert response.status_code == 200
                assert response.content == b"x" * size
            assert (await http.get(f"{base}/after")).json()["target"] == "/after"
        assert (plain.connections, secure.connections) == (1, 1)  # kept alive through every body
        assert proxy.connections == 2  # the instance's side too: one plain, one tunnel
        entries = await hooks.wait(2 * (len(SIZES) + 1))
    received = [e.bytes_received for e in entries if e.info.path.startswith("/big/")]
    assert received == list(SIZES) * 2
    assert not any(e.error for e in entries)


@asynccontextmanager
async def lying_server(answer: Callable[[int], bytes], *, close: bool) -> AsyncIterator[tuple[int, list[int]]]:
    """Answers each connection's first request with `answer(connection number)`, then closes
    (or keeps the connection open, silent). Yields its port and the connections seen."""
    seen: list[int] = []

    async def handle(stream: trio.SocketStream) -> None:
        seen.append(len(seen))
        request = b""
        while b"\r\n\r\n" not in request:
            data = await stream.receive_some(65536)
            if not data:
                return
            request += data
        await stream.send_all(answer(seen[-1]))
        if not close:
            await trio.sleep_forever()
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield listeners[0].socket.getsockname()[1], seen
        nursery.cancel_scope.cancel()


def response(body: bytes, declared: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % declared + body


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024])
async def test_a_body_cut_short_ends_the_connection_with_an_error(tmp_path: Path, size: int) -> None:
    hooks = Recording()
    async with (
        lying_server(lambda _: response(b"x" * (size // 2), size), close=True) as (port, _seen),
        running_proxy(tmp_path, hooks=hooks) as proxy,
        client(proxy) as http,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"http://127.0.0.1:{port}/short")
        entries = await hooks.wait(1)
    assert entries[0].status_code == 200 and entries[0].error and "relay failed" in entries[0].error


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024])
async def test_bytes_past_the_declared_length_stay_behind(tmp_path: Path, size: int) -> None:
    """Only the declared body reaches the instance, and an upstream connection with bytes
    left over is not used again: the next request gets a clean one."""
    def answer(number: int) -> bytes:
        return response(b"x" * size + b"GARBAGE", size) if number == 0 else response(b"fine", 4)

    hooks = Recording()
    async with (
        lying_server(answer, close=False) as (port, seen),
        running_proxy(tmp_path, hooks=hooks) as proxy,
        client(proxy) as http,
    ):
        first = await http.get(f"http://127.0.0.1:{port}/long")
        assert first.content == b"x" * size
        with trio.fail_after(5):
            second = await http.get(f"http://127.0.0.1:{port}/next")
        assert second.status_code == 200 and second.content == b"fine"
        assert seen == [0, 1]
