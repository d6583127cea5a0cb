"""Small stream helpers of the proxy: h11 over a trio stream, replayed bytes, the original destination."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import select
import socket
import struct
from typing import Any, cast

import h11
import trio

SO_ORIGINAL_DST = 80
READ_SIZE = 1048576
PIPE_SIZE = 1048576
F_SETPIPE_SZ = 1031
_ZEROS = memoryview(bytes(READ_SIZE))
"""Stand-in bytes h11 counts for a spliced body (`Peer.sent_past`): it only takes their length."""


class Prefixed(trio.abc.Stream):
    """A stream that first gives back bytes already read from it (a peeked ClientHello)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self.prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.prefix:
            size = len(self.prefix) if max_bytes is None else max_bytes
            data, self.prefix = self.prefix[:size], self.prefix[size:]
            return data
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Peer:
    """One side of an exchange: a stream and its h11 state machine.

    A body of known length may pass beside h11 (`send_body`, `sent_past`, `skipped_body`):
    h11 then does no per-chunk parsing or copying, yet still knows where each message
    ends, so the connection stays usable for the next request.
    """

    def __init__(self, stream: trio.abc.Stream, role: Any) -> None:
        self.stream = stream
        self.conn = h11.Connection(role)
        self._fresh = False
        """The state machine was replaced after a message whose body it never saw: the
        next cycle has begun already."""

    async def next_event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self.conn.receive_data(cast(bytes, data))  # h11 takes any bytes-like (typed bytes): no copy

    async def send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send_all(data)

    async def send_body(self, data: bytes | bytearray | memoryview) -> None:
        """Body bytes, as is: h11 counts them against the message's length without copying."""
        pieces = self.conn.send_with_data_passthrough(h11.Data(data=cast(bytes, data)))  # passed through as is
        if pieces:
            await self.stream.send_all(pieces[0] if len(pieces) == 1 else b"".join(pieces))

    def sent_past(self, count: int) -> None:
        """`count` body bytes went out beside the stream (spliced in the kernel): h11 counts
        them as sent (a Content-Length body; nothing is written)."""
        while count > 0:
            size = min(count, len(_ZEROS))
            self.conn.send_with_data_passthrough(h11.Data(data=cast(bytes, _ZEROS[:size])))
            count -= size

    def skipped_body(self, keep_alive: bool) -> None:
        """The rest of the message being received was read beside h11 (a Content-Length body
        relayed raw): start afresh if the connection may carry another exchange, else end
        it (the next `reusable` says no)."""
        if keep_alive and self.conn.our_state is h11.DONE and not self.conn.trailing_data[0]:
            self.conn = h11.Connection(self.conn.our_role)
            self._fresh = True
        else:
            self.conn.send_failed()  # unusable: h11 no longer knows where the stream stands

    def reusable(self) -> bool:
        """Both sides finished their message and may start another on this connection."""
        if self._fresh:
            return True
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    def next_cycle(self) -> None:
        if self._fresh:
            self._fresh = False
        else:
            self.conn.start_next_cycle()

    async def aclose(self) -> None:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self.stream.aclose()


def keeps_alive(event: h11.Request | h11.Response) -> bool:
    """Whether a message allows another exchange on its connection (h11's own rule)."""
    tokens = {token.strip().lower() for key, value in event.headers if key.lower() == b"connection" for token in value.split(b",")}
    return b"close" not in tokens and event.http_version >= b"1.1"


def plain_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The TCP socket under a stream that adds nothing to its bytes (no TLS, no replayed
    prefix left), or None."""
    if isinstance(stream, Prefixed) and not stream.prefix:
        stream = stream.inner
    return stream.socket if isinstance(stream, trio.SocketStream) else None


async def splice(source: trio.socket.SocketType, sink: trio.socket.SocketType, count: int) -> int:
    """Move `count` bytes from one socket to another inside the kernel (splice(2) through a
    pipe): a big download passes the proxy without being copied into Python. Returns how
    many bytes moved; fewer only when the source closed."""
    reader, writer = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(writer, F_SETPIPE_SZ, PIPE_SIZE)
    flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
    moved = 0
    rounds = 0
    try:
        while moved < count:
            # Try first, wait only when the kernel has nothing: at full speed the data is
            # there already, and a wait per chunk would cost more than the chunk's move.
            try:
                filled = os.splice(source.fileno(), writer, min(PIPE_SIZE, count - moved), flags=flags)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(source)
                continue
            if filled == 0:
                break
            while filled:
                try:
                    sent = os.splice(reader, sink.fileno(), filled, flags=flags)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sink)
                    continue
                filled -= sent
                moved += sent
            rounds += 1
            if rounds % 16 == 0:  # let other tasks run (and a cancel through) now and then
                await trio.lowlevel.checkpoint()
    finally:
        os.close(reader)
        os.close(writer)
    return moved


def original_destination(sock: trio.socket.SocketType) -> tuple[str, int] | None:
    """Where a connection redirected by nftables was going, or None if it came to the proxy itself."""
    if sock.family != socket.AF_INET:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    except OSError:
        return None
    port = struct.unpack_from("!H", raw, 2)[0]
    address = socket.inet_ntoa(raw[4:8])
    local = sock.getsockname()
    if (address, port) == (local[0], local[1]):
        return None
    return address, int(port)


def looks_closed(sock: trio.socket.SocketType) -> bool:
    """A kept-alive connection the peer closed (or that has unread bytes: unusable too)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def split_host_port(value: str, default_port: int, *, port_required: bool = False) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` -> (host without brackets, port).

    Some clients leave the brackets off an IPv6 literal (`CONNECT 2002:a00:1::1:443`);
    where a port is required (CONNECT's authority form) the last group is the port.
    """
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"bad host {value!r}")
        host, rest = value[1:end], value[end + 1 :]
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif value.count(":") == 1:
        host, port_text = value.split(":")
        port = int(port_text)
    else:
        host, port = _bare_ipv6(value, default_port, port_required)
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad host {value!r}")
    return host.lower().rstrip("."), port


def _bare_ipv6(value: str, default_port: int, port_required: bool) -> tuple[str, int]:
    left, _, right = value.rpartition(":")
    with_port: tuple[str, int] | None = None
    with contextlib.suppress(ValueError):
        with_port = str(ipaddress.IPv6Address(left)), int(right)
    if port_required and with_port is not None:
        return with_port
    with contextlib.suppress(ValueError):
        return str(ipaddress.IPv6Address(value)), default_port
    if with_port is not None:
        return with_port
    return value, default_port
