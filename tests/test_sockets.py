"""`corral.sockets.DirectSocket` on real loopback TCP connections."""

from __future__ import annotations

import socket

import trio

from corral.sockets import FAIR_STREAK, DirectSocket


async def _pair() -> tuple[DirectSocket, socket.socket, trio.SocketListener]:
    """(our end, the peer's blocking socket, the listener to close)."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted: list[trio.SocketStream] = []

        async def accept() -> None:
            accepted.append(await listener.accept())

        nursery.start_soon(accept)
        ours = await DirectSocket.connect("127.0.0.1", port)
    peer = socket.socket(fileno=accepted[0].socket.detach())
    peer.setblocking(True)
    return ours, peer, listener


async def test_round_trip_and_end() -> None:
    ours, peer, listener = await _pair()
    try:
        await ours.send_all(b"hello")
        assert await trio.to_thread.run_sync(peer.recv, 100) == b"hello"
        peer.sendall(b"world")
        assert await ours.receive_some() == b"world"
        peer.close()
        assert await ours.receive_some() == b""
    finally:
        ours.close()
        await listener.aclose()


async def test_a_large_send_waits_for_the_reader_and_arrives_whole() -> None:
    ours, peer, listener = await _pair()
    data = bytes(range(256)) * 40_000  # 10 MB: far more than the socket buffers hold

    def read_all() -> bytes:
        chunks, size = [], 0
        while size < len(data):
            chunk = peer.recv(1 << 20)
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    try:
        async with trio.open_nursery() as nursery:
            received: list[bytes] = []

            async def reader() -> None:
                received.append(await trio.to_thread.run_sync(read_all))

            nursery.start_soon(reader)
            await ours.send_all(data)
        assert received[0] == data
    finally:
        ours.close()
        peer.close()
        await listener.aclose()


async def test_a_flood_of_data_lets_other_tasks_run() -> None:
    """Reads that never wait still yield now and then: the loop is not taken over."""
    ours, peer, listener = await _pair()
    peer.sendall(b"x" * (FAIR_STREAK * 4 * 100))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.sleep(0.01)
            before = ticks
            for _ in range(FAIR_STREAK * 4):
                assert await ours.receive_some(100) == b"x" * 100  # all in already: no wait
            assert ticks > before
            nursery.cancel_scope.cancel()
    finally:
        ours.close()
        peer.close()
        await listener.aclose()


async def test_a_wait_is_cancellable_and_close_wakes_a_waiting_reader() -> None:
    ours, peer, listener = await _pair()
    try:
        with trio.move_on_after(0.05) as scope:
            await ours.receive_some()
        assert scope.cancelled_caught
        failures: list[BaseException] = []

        async def reader() -> None:
            try:
                await ours.receive_some()
            except trio.ClosedResourceError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.sleep(0.02)
            ours.close()
        assert len(failures) == 1
    finally:
        ours.close()
        peer.close()
        await listener.aclose()

