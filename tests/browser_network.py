"""A network namespace of its own for a test browser, with chosen loopback ports forwarded.

Chromium aborts every request in flight with `net::ERR_NETWORK_CHANGED` whenever the
interfaces or addresses it can see change, and on a machine where tests create and
destroy instances (veths, bridges, namespaces) they change all the time: a page's
module or an API call then fails at random (measured: about one fresh page load in
fifteen to forty while other test sessions ran instances). In a namespace of its own
Chromium sees only its loopback, which never changes. Each port the test needs is
forwarded from that loopback to the same port on the host's (`outward`), and the
DevTools port the other way (`inward`).

A socket stays in the namespace it was created in, so the listening and connecting
sockets inside are made by a thread visiting it (`socket_in_netns`), and all the
copying runs on the test's own trio loop.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from corral.net.preview.upstream import socket_in_netns
from tests.support import TEST_SLOT, free_port

Connect = Callable[[], Awaitable[trio.SocketStream]]


class BrowserNetwork:
    def __init__(self, name: str, nursery: trio.Nursery) -> None:
        self.name = name
        self.path = f"/run/netns/{name}"
        self._nursery = nursery

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    async def outward(self, port: int) -> None:
        """127.0.0.1:`port` inside reaches 127.0.0.1:`port` of the host."""
        sock = trio.socket.from_stdlib_socket(await trio.to_thread.run_sync(socket_in_netns, self.path))
        await _listen(sock, port)
        self._nursery.start_soon(_serve, sock, lambda: trio.open_tcp_stream("127.0.0.1", port), self._nursery)

    async def inward(self, port: int) -> int:
        """A host port whose connections reach 127.0.0.1:`port` inside."""
        host_port = free_port()
        sock = trio.socket.socket()
        await _listen(sock, host_port)

        async def connect() -> trio.SocketStream:
            inner = trio.socket.from_stdlib_socket(await trio.to_thread.run_sync(socket_in_netns, self.path))
            try:
                await inner.connect(("127.0.0.1", port))
            except BaseException:
                inner.close()
                raise
            return trio.SocketStream(inner)

        self._nursery.start_soon(_serve, sock, connect, self._nursery)
        return host_port


async def _listen(sock: trio.socket.SocketType, port: int) -> None:
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
    await sock.bind(("127.0.0.1", port))
    sock.listen(128)


async def _serve(listener: trio.socket.SocketType, connect: Connect, nursery: trio.Nursery) -> None:
    with listener:
        while True:
            sock, _ = await listener.accept()
            nursery.start_soon(_splice, trio.SocketStream(sock), connect)


async def _splice(client: trio.SocketStream, connect: Connect) -> None:
    try:
        upstream = await connect()
    except OSError:
        await client.aclose()
        return
    async with client, upstream, trio.open_nursery() as nursery:
        nursery.start_soon(_copy, client, upstream, nursery.cancel_scope)
        nursery.start_soon(_copy, upstream, client, nursery.cancel_scope)


async def _copy(source: trio.SocketStream, target: trio.SocketStream, scope: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await target.send_all(data)
        await target.send_eof()  # a half-close, as the peer sent
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        scope.cancel()  # a reset: both directions end


_names = iter(range(1_000_000))


@contextlib.asynccontextmanager
async def browser_network() -> AsyncIterator[BrowserNetwork]:
    """A fresh namespace with its loopback up, deleted on exit (needs root)."""
    name = f"corral-browser{TEST_SLOT}-{os.getpid()}-{next(_names)}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
        async with trio.open_nursery() as nursery:
            yield BrowserNetwork(name, nursery)
            nursery.cancel_scope.cancel()
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
