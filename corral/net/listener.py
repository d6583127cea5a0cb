"""One TCP accept loop for the node's servers (the preview router, the egress proxy).

Each connection is handed to `on_connection(sock, peer_address)` in a task of its own,
with Nagle off; an accept that fails (EMFILE and friends) is logged and retried after
a pause instead of spinning.
"""

from __future__ import annotations

import logging
import socket as stdlib_socket
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("corral.net")

IP_FREEBIND = 15

OnConnection = Callable[[trio.socket.SocketType, str], Awaitable[None]]


async def serve_tcp(
    host: str,
    port: int,
    on_connection: OnConnection,
    name: str,
    *,
    freebind: bool = False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on host:port until cancelled; `task_status.started(bound port)` once listening.

    `freebind` binds to an address the host does not have yet (a bridge made later)."""
    family = stdlib_socket.AF_INET6 if ":" in host else stdlib_socket.AF_INET
    listener = trio.socket.socket(family, stdlib_socket.SOCK_STREAM)
    listener.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
    if freebind:
        listener.setsockopt(stdlib_socket.SOL_IP, IP_FREEBIND, 1)
    try:
        await listener.bind((host, port))
        listener.listen(1024)
        task_status.started(int(listener.getsockname()[1]))
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    sock, address = await listener.accept()
                except OSError as exc:  # EMFILE and friends: do not spin
                    log.warning("%s accept failed: %s", name, exc)
                    await trio.sleep(0.1)
                    continue
                sock.setsockopt(stdlib_socket.IPPROTO_TCP, stdlib_socket.TCP_NODELAY, 1)
                nursery.start_soon(on_connection, sock, str(address[0]))
    finally:
        listener.close()
