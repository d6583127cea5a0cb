"""A connected socket read and written directly, waiting on trio only when it would block.

A trio socket stream yields to the scheduler after every call that succeeds at once:
nearly every send, and every read of bytes already in. In a server each such trip lets
every other ready task run and polls the sockets, on the request's way (issue 28: on
an exec through the API, a third of its scheduler steps). `DirectSocket` calls the
socket first and waits (`wait_readable`, `wait_writable`) only on `BlockingIOError`;
those waits stay cancellation points. A long run of calls that never wait (a flood of
output read as fast as it comes) still yields every `FAIR_STREAK` calls, so the other
tasks run. One task may read while another writes, as with a trio stream.
"""

from __future__ import annotations

import contextlib
import socket

import trio

FAIR_STREAK = 16
"""Calls in a row that did not wait, after which the socket yields to the scheduler."""
RECEIVE_SIZE = 65536


class DirectSocket:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._streak = 0

    @classmethod
    def of_stream(cls, stream: trio.SocketStream) -> DirectSocket:
        """The stream's socket (its options kept: `TCP_NODELAY`), now this object's alone."""
        return cls(socket.socket(fileno=stream.socket.detach()))

    @classmethod
    async def connect(cls, host: str, port: int) -> DirectSocket:
        """A TCP connection as `trio.open_tcp_stream` makes it (names, address families, `TCP_NODELAY`)."""
        return cls.of_stream(await trio.open_tcp_stream(host, port))

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await self._fair()
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                self._streak = 0
                await trio.lowlevel.wait_writable(self.sock)
                continue
            view = view[sent:]

    async def receive_some(self, max_bytes: int = RECEIVE_SIZE) -> bytes:
        """What has come, at most `max_bytes` (waiting for something); b"" at the end."""
        await self._fair()
        while True:
            try:
                return self.sock.recv(max_bytes)
            except BlockingIOError:
                self._streak = 0
                await trio.lowlevel.wait_readable(self.sock)

    async def _fair(self) -> None:
        self._streak += 1
        if self._streak >= FAIR_STREAK:
            self._streak = 0
            await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Close now; a task waiting on the socket gets `trio.ClosedResourceError`."""
        with contextlib.suppress(OSError):
            if self.sock.fileno() >= 0:
                trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


__all__ = ["DirectSocket"]
