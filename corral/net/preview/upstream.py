"""Connections from the router to apps: the instance's address, or its own loopback.

Dev servers bind to 127.0.0.1 by default (Flask, Vite, most `npm run dev`), and
then the instance's bridge address finds nothing: the most common "my preview does
not work" of peer platforms. A socket keeps the network namespace it was created in,
so the router creates one inside the instance's namespace (a thread does `setns`,
`socket()`, and `setns` back) and connects it to 127.0.0.1 there. Which way an
app answered is remembered per (namespace, port), so later connections try that way
first; the direct way needs no thread and stays the fast path.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
from collections import OrderedDict

import trio

from .routes import Upstream

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_REMEMBERED = 4096


class UpstreamUnreachable(Exception):
    """No app accepted the connection, by either way."""


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def socket_in_netns(netns_path: str, family: int = socket.AF_INET) -> socket.socket:
    """A TCP socket that lives in the network namespace at `netns_path` (runs on a thread)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns_path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                return socket.socket(family, socket.SOCK_STREAM)
            finally:
                _setns(own)  # the worker thread goes back to the host's namespace
        finally:
            os.close(target)
    finally:
        os.close(own)


class Connector:
    def __init__(self, connect_timeout: float = 5.0) -> None:
        self.connect_timeout = connect_timeout
        self._loopback: OrderedDict[tuple[str, int], bool] = OrderedDict()

    async def _direct(self, upstream: Upstream) -> trio.socket.SocketType:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        try:
            await sock.connect((upstream.address, upstream.port))
        except BaseException:
            sock.close()
            raise
        return sock

    async def _loopback_way(self, upstream: Upstream) -> trio.socket.SocketType:
        assert upstream.netns is not None
        raw = await trio.to_thread.run_sync(socket_in_netns, upstream.netns)
        sock = trio.socket.from_stdlib_socket(raw)
        try:
            await sock.connect(("127.0.0.1", upstream.port))
        except BaseException:
            sock.close()
            raise
        return sock

    async def connect(self, upstream: Upstream) -> trio.socket.SocketType:
        """A connected socket to the app, or `UpstreamUnreachable`."""
        key = (upstream.netns or "", upstream.port)
        ways = [self._direct]
        if upstream.netns:
            ways = [self._loopback_way, self._direct] if self._loopback.get(key) else [self._direct, self._loopback_way]
        last: OSError | None = None
        with trio.move_on_after(self.connect_timeout):
            for way in ways:
                try:
                    sock = await way(upstream)
                except OSError as exc:
                    last = exc
                    continue
                if upstream.netns:
                    self._remember(key, way == self._loopback_way)
                sock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
                return sock
            raise UpstreamUnreachable(str(last) if last else "connection refused")
        raise UpstreamUnreachable(f"no answer within {self.connect_timeout:g} s")

    def _remember(self, key: tuple[str, int], loopback: bool) -> None:
        self._loopback[key] = loopback
        self._loopback.move_to_end(key)
        while len(self._loopback) > _REMEMBERED:
            self._loopback.popitem(last=False)


def looks_closed(sock: trio.socket.SocketType) -> bool:
    """Whether an idle kept-alive connection was closed (or sent junk) meanwhile."""
    try:
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)

