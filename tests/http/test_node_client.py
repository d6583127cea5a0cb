"""The node-to-node client (`corral.http.node_client`) against a raw TCP server that
writes its answers byte for byte: an answer that came whole with its head is handed
over whole, one whose body follows later is yielded chunk by chunk with nothing lost,
connections are kept alive between requests, and an answer cut off is
`NodeUnreachable`."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import pytest
import trio

from corral.http.node_client import NodeClient, NodeUnreachable

Script = Callable[[trio.SocketStream, int], Awaitable[None]]


async def read_request(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return data
        data += chunk
    return data


async def serve(nursery: trio.Nursery, script: Script) -> tuple[int, list[int]]:
    """A server on a free loopback port that runs `script` for each request (its
    connection and how many requests that connection carried before); returns the port
    and a list that counts its accepted connections."""
    accepted: list[int] = []

    async def handle(stream: trio.SocketStream) -> None:
        accepted.append(1)
        served = 0
        with contextlib.suppress(trio.ClosedResourceError):  # a script that hung up
            while await read_request(stream):
                await script(stream, served)
                served += 1

    listeners = await nursery.start(trio.serve_tcp, handle, 0)
    return listeners[0].socket.getsockname()[1], accepted


async def test_an_answer_in_with_its_head_is_whole_and_its_connection_is_kept() -> None:
    async def script(stream: trio.SocketStream, served: int) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n" + b'{"n": %d}  ' % served)

    async with trio.open_nursery() as nursery:
        port, accepted = await serve(nursery, script)
        client = NodeClient()
        for n in range(3):
            answer = await client.request(f"http://127.0.0.1:{port}", "GET", "/x", [(b"host", b"node")], b"")
            assert answer.status == 200 and answer.body_if_in() == b'{"n": %d}  ' % n
            await answer.aclose()
        assert len(accepted) == 1  # one connection, kept alive for all three
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_body_that_follows_its_head_is_yielded_as_it_comes() -> None:
    async def script(stream: trio.SocketStream, served: int) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfirst")
        await trio.sleep(0.2)
        await stream.send_all(b"-last")

    async with trio.open_nursery() as nursery:
        port, accepted = await serve(nursery, script)
        client = NodeClient()
        for _ in range(2):
            answer = await client.request(f"http://127.0.0.1:{port}", "POST", "/x", [(b"host", b"node")], b"{}")
            assert answer.body_if_in() is None  # half of it is in: the rest is waited for
            assert [chunk async for chunk in answer.chunks()] == [b"first", b"-last"]
            await answer.aclose()
        assert len(accepted) == 1
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_an_answer_cut_off_is_node_unreachable_and_its_connection_is_not_kept() -> None:
    async def script(stream: trio.SocketStream, served: int) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npart")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        port, accepted = await serve(nursery, script)
        client = NodeClient()
        for _ in range(2):
            answer = await client.request(f"http://127.0.0.1:{port}", "GET", "/x", [(b"host", b"node")], b"")
            assert answer.body_if_in() is None
            with pytest.raises(NodeUnreachable):
                _ = [chunk async for chunk in answer.chunks()]
            await answer.aclose()
        assert len(accepted) == 2  # the broken connection was not used again
        with pytest.raises(NodeUnreachable, match="cannot connect"):
            await client.request("http://127.0.0.1:1", "GET", "/x", [(b"host", b"node")], b"")
        await client.aclose()
        nursery.cancel_scope.cancel()
