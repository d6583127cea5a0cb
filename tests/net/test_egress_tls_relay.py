"""HTTPS bodies through the egress proxy's raw relay, where TLS records do not line up
with socket reads: ciphertext that trickles in, split inside records, and upstreams
that end a body early (with or without close_notify)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from tests.net.egress_support import Recording, echo_server
from tests.net.test_egress_proxy import client, running_proxy, upstream_tls

PIECE = 7001
"""Not a divisor of a TLS record (16 KiB of plaintext plus its overhead): reads end inside records."""


@asynccontextmanager
async def trickling(target_port: int) -> AsyncIterator[int]:
    """A TCP relay in front of `target_port` that passes the server's bytes on in small
    pieces with a pause between them, so the proxy sees records arrive in parts."""

    async def pump(source: trio.SocketStream, sink: trio.SocketStream, piece: int | None) -> None:
        try:
            while data := await source.receive_some(65536):
                if piece is None:
                    await sink.send_all(data)
                    continue
                for start in range(0, len(data), piece):
                    await sink.send_all(data[start : start + piece])
                    await trio.sleep(0.0005)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await sink.aclose()

    async def handle(downstream: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream("127.0.0.1", target_port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, downstream, upstream, None)
            nursery.start_soon(pump, upstream, downstream, PIECE)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_a_body_whose_records_arrive_in_pieces_is_relayed_whole(tmp_path: Path) -> None:
    tls, bundle = upstream_tls(tmp_path)
    hooks = Recording()
    sizes = (1, 16383, 16385, 600_001)
    async with (
        echo_server(tls=tls) as secure,
        trickling(secure.port) as port,
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        with trio.fail_after(30):
            for size in sizes:
                response = await http.get(f"https://127.0.0.1:{port}/big/{size}")
                assert response.status_code == 200
                assert response.content == b"x" * size
            assert (await http.get(f"https://127.0.0.1:{port}/after")).json()["target"] == "/after"
        assert secure.connections == 1  # the upstream stayed usable after every body
        entries = await hooks.wait(len(sizes) + 1)
    assert [e.bytes_received for e in entries if e.info.path.startswith("/big/")] == list(sizes)
    assert not any(e.error for e in entries)


@asynccontextmanager
async def short_tls_server(tmp_path: Path, declared: int, sent: int, *, close_notify: bool) -> AsyncIterator[tuple[int, str]]:
    """An HTTPS server that declares `declared` body bytes, sends `sent`, then closes the
    connection (with close_notify, or by dropping the socket). Yields its port and CA file."""
    context, bundle = upstream_tls(tmp_path)

    async def handle(raw: trio.SocketStream) -> None:
        stream = trio.SSLStream(raw, context, server_side=True)
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                data = await stream.receive_some(65536)
                if not data:
                    return
                request += data
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % declared + b"x" * sent)
            if close_notify:
                await stream.aclose()
            else:
                await raw.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield listeners[0].socket.getsockname()[1], bundle
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("close_notify", [True, False])
@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024])
async def test_an_https_body_cut_short_is_an_error_not_a_whole_body(tmp_path: Path, size: int, close_notify: bool) -> None:
    hooks = Recording()
    async with (
        short_tls_server(tmp_path, size, size // 2, close_notify=close_notify) as (port, bundle),
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        with trio.fail_after(10), pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"https://127.0.0.1:{port}/short")
        entries = await hooks.wait(1)
    assert entries[0].status_code == 200 and entries[0].error and "relay failed" in entries[0].error
