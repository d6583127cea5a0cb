"""The server side of RFC 6455 WebSockets, for the terminal, on a raw trio stream.

The agent imports only the standard library, trio and h11 (DESIGN.md: it runs in
every instance), and the terminal needs a small part of the protocol: the accept
key, frames with and without masks, fragments, ping, pong and close. That part is
written here rather than pulling wsproto into every instance.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import struct

import trio

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0
MAX_MESSAGE = 1 << 20


class WebSocketClosed(Exception):
    """The peer closed the WebSocket (or broke the connection)."""


def accept_key(key: str) -> str:
    """`Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked final frame (what a server sends)."""
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload


class WebSocket:
    """Messages over `stream`, whose first bytes (after the handshake) are `buffered`."""

    def __init__(self, stream: trio.abc.Stream, buffered: bytes = b"") -> None:
        self.stream = stream
        self._buffer = bytearray(buffered)
        self._send_lock = trio.Lock()
        self.closed = False

    async def _read(self, count: int) -> bytes:
        while len(self._buffer) < count:
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise WebSocketClosed() from exc
            if not data:
                raise WebSocketClosed()
            self._buffer += data
        chunk = bytes(self._buffer[:count])
        del self._buffer[:count]
        return chunk

    async def _frame(self) -> tuple[bool, int, bytes]:
        first, second = await self._read(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self._read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self._read(8))
        if length > MAX_MESSAGE:
            await self.close(1009)
            raise WebSocketClosed()
        mask = await self._read(4) if second & 0x80 else b""
        payload = await self._read(length)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if length < 64 else _unmask(payload, mask)
        return bool(first & 0x80), first & 0x0F, payload

    async def receive(self) -> tuple[int, bytes]:
        """The next message: (TEXT or BINARY, payload). Answers pings; raises WebSocketClosed."""
        opcode, parts = 0, list[bytes]()
        while True:
            final, frame_opcode, payload = await self._frame()
            if frame_opcode == PING:
                await self._send(PONG, payload)
                continue
            if frame_opcode == PONG:
                continue
            if frame_opcode == CLOSE:
                await self.close()
                raise WebSocketClosed()
            if frame_opcode != CONTINUATION:
                opcode, parts = frame_opcode, []
            parts.append(payload)
            if final:
                return opcode, b"".join(parts)

    async def _send(self, opcode: int, payload: bytes) -> None:
        async with self._send_lock:
            try:
                await self.stream.send_all(frame(opcode, payload))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise WebSocketClosed() from exc

    async def send_binary(self, payload: bytes) -> None:
        await self._send(BINARY, payload)

    async def close(self, code: int = 1000) -> None:
        if self.closed:
            return
        self.closed = True
        with trio.move_on_after(1), contextlib.suppress(WebSocketClosed):
            await self._send(CLOSE, struct.pack("!H", code))


def _unmask(payload: bytes, mask: bytes) -> bytes:
    """XOR with the 4-byte mask, a machine word at a time."""
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(len(payload), "little")
