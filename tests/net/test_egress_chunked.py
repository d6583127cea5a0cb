"""Chunked bodies through the egress proxy: many small upstream chunks, some arriving
together and some alone, reach the instance byte for byte (HTTP and HTTPS), are counted
in the audit row, and leave both connections usable."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from tests.net.egress_support import Recording
from tests.net.test_egress_proxy import client, running_proxy, upstream_tls

PIECES = [bytes([65 + i % 26]) * (1 + i * 37 % 500) for i in range(400)]
BODY = b"".join(PIECES)


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)


@asynccontextmanager
async def chunked_server(tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, list[int]]]:
    """Answers every request on a connection with `BODY` in `PIECES` as chunks: the first
    half written at once, the rest a few chunks per write with pauses. Yields its port and
    the requests seen per connection."""
    seen: list[int] = []

    async def handle(raw: trio.SocketStream) -> None:
        stream: trio.abc.Stream = raw
        if tls is not None:
            stream = trio.SSLStream(raw, tls, server_side=True)
        seen.append(0)
        number = len(seen) - 1
        buffered = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffered += data
                buffered = buffered.split(b"\r\n\r\n", 1)[1]
                seen[number] += 1
                half = len(PIECES) // 2
                await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(PIECES[:half]))
                for start in range(half, len(PIECES), 3):
                    await stream.send_all(chunked(PIECES[start : start + 3]))
                    await trio.sleep(0.001)
                await stream.send_all(b"0\r\n\r\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield listeners[0].socket.getsockname()[1], seen
        nursery.cancel_scope.cancel()


async def test_a_chunked_body_arrives_whole_and_counted_both_schemes(tmp_path: Path) -> None:
    tls, bundle = upstream_tls(tmp_path)
    hooks = Recording()
    async with (
        chunked_server() as (plain, plain_seen),
        chunked_server(tls) as (secure, secure_seen),
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        with trio.fail_after(30):
            for base in (f"http://127.0.0.1:{plain}", f"https://127.0.0.1:{secure}"):
                for _ in range(2):
                    response = await http.get(f"{base}/chunked")
                    assert response.status_code == 200
                    assert response.content == BODY
        assert (plain_seen, secure_seen) == ([2], [2])  # one upstream connection each, kept alive
        entries = await hooks.wait(4)
    assert [e.bytes_received for e in entries] == [len(BODY)] * 4
    assert not any(e.error for e in entries)


async def test_a_scrubbed_chunked_body_is_scrubbed_across_reads(tmp_path: Path) -> None:
    """The scrubber sees the body in whatever pieces the reads bring: the value swapped
    throughout, nothing lost or doubled."""
    hooks = Recording(replace=(b"placeholder", b"A"))  # scrub: every "A" back to "placeholder"
    async with chunked_server() as (port, _seen), running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        with trio.fail_after(30):
            response = await http.get(f"http://127.0.0.1:{port}/chunked")
    assert response.status_code == 200
    assert response.content == BODY.replace(b"A", b"placeholder")
