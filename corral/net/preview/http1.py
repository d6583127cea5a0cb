"""A minimal HTTP/1.1 message layer for the preview router: heads parsed, bodies relayed raw.

Why not h11: h11 decodes and re-encodes every body chunk and validates each event;
the router only needs each message's framing to know where it ends, so it parses
heads and relays body bytes untouched (a chunked body's framing is tracked, never
decoded). That keeps the time the router adds to a request in the tens of
microseconds. The parser is strict where leniency would let a request mean one thing
to the router and another to the app behind it (request smuggling): no obs-fold, no
bare CR or LF, no Content-Length beside Transfer-Encoding, one Content-Length value.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field
from http import HTTPStatus

import trio

RECV_SIZE = 65536
MAX_HEAD = 64 * 1024
MAX_CHUNK_LINE = 4096
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = frozenset("0123456789abcdefABCDEF")


_CLASS_PHRASES = {1: "Informational", 2: "Success", 3: "Redirection", 4: "Client Error", 5: "Server Error"}


def reason_phrase(status: int) -> str:
    """The reason phrase of a status line the router writes (`HTTPStatus`'s; a code it
    does not know gets its class's). Never empty: strict clients (Python's `websockets`)
    refuse `HTTP/1.1 101` without ` SP reason-phrase` (RFC 9112 4)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _CLASS_PHRASES.get(status // 100, "Unknown")


def status_line(version: str, status: int | str, reason: str = "") -> str:
    """`HTTP-version SP status-code SP reason-phrase`, the reason filled in when it is empty."""
    return f"{version} {status} {reason or reason_phrase(int(status))}"


class HttpError(Exception):
    """A message the router cannot relay; `status` is what the client is told."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PeerClosed(Exception):
    """The other side closed the connection before a message was complete."""


class Framing(enum.Enum):
    NONE = "none"
    LENGTH = "length"
    CHUNKED = "chunked"
    UNTIL_CLOSE = "until_close"


Header = tuple[str, str, str]
"""(lowercased name, name as sent, value)."""


@dataclass(slots=True)
class Head:
    """A parsed request or response head. For a request `first` is (method, target, version)."""

    first: tuple[str, str, str]
    headers: list[Header]
    framing: Framing = Framing.NONE
    length: int = 0
    connection_tokens: frozenset[str] = field(default_factory=frozenset)
    relayed_by: str | None = None
    """For a request another node's router relayed here (`routes.RELAY_HEADER`, its
    signature checked): that node's name. Such a request is never relayed again."""

    def get(self, name: str) -> str | None:
        """The first value of header `name` (lowercase)."""
        for lower, _, value in self.headers:
            if lower == name:
                return value
        return None

    def get_all(self, name: str) -> list[str]:
        return [value for lower, _, value in self.headers if lower == name]


class Buffered:
    """A socket with a read buffer: heads are cut from it, what follows stays for the body."""

    __slots__ = ("buf", "eof", "sock")

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.eof = False

    async def fill(self) -> bool:
        data = await recv_some(self.sock)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    async def read_head(self) -> bytes | None:
        """The bytes of the next head (without its blank line); None at EOF before any byte."""
        scanned = 0
        while True:
            if scanned == 0 and self.buf[:2] == b"\r\n":
                del self.buf[:2]  # RFC 9112 2.2: ignore empty lines before a request line
                continue
            end = self.buf.find(b"\r\n\r\n", max(0, scanned - 3))
            if end >= 0:
                head = bytes(self.buf[:end])
                del self.buf[: end + 4]
                return head
            if len(self.buf) > MAX_HEAD:
                raise HttpError(431, "the request head is larger than 64 KiB")
            scanned = len(self.buf)
            if not await self.fill():
                if self.buf:
                    raise PeerClosed("the connection closed in the middle of a message head")
                return None

    def take(self, n: int | None = None) -> bytes:
        """Remove and return the first `n` buffered bytes (all of them by default)."""
        if n is None or n >= len(self.buf):
            data = bytes(self.buf)
            self.buf.clear()
            return data
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


# Socket I/O without trio's two scheduler round trips per call: the socket is tried at
# once and the task waits (a checkpoint) only when the kernel has nothing to give or no
# room to take. A request through the router still waits at least once (for the app's
# answer); loops that move many buffers call `yield_now` every few rounds, so a fast
# transfer cannot starve the other connections. Closing the socket through its trio
# wrapper still wakes a task waiting on it.


async def recv_some(sock: trio.socket.SocketType, size: int = RECV_SIZE) -> bytes:
    fd = sock.fileno()
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


async def send_all(sock: trio.socket.SocketType, data: bytes | bytearray) -> None:
    fd = sock.fileno()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)


class Yielder:
    """`await tick()` checkpoints every `every` calls: fairness for tight relay loops."""

    __slots__ = ("count", "every")

    def __init__(self, every: int = 16) -> None:
        self.every = every
        self.count = 0

    async def tick(self) -> None:
        self.count += 1
        if self.count >= self.every:
            self.count = 0
            await trio.lowlevel.checkpoint()


def _lines(head: bytes) -> list[str]:
    text = head.decode("latin-1")
    crlf = text.count("\r\n")
    if text.count("\n") != crlf or text.count("\r") != crlf or "\0" in text:
        raise HttpError(400, "bare CR, LF or NUL in the message head")
    return text.split("\r\n")


def _headers(lines: list[str], *, strict: bool = True) -> list[Header]:
    """Header lines; `strict` (requests) also checks that names are tokens."""
    headers: list[Header] = []
    for line in lines:
        if not line:
            continue
        if line[0] in " \t":
            raise HttpError(400, "folded header lines are not accepted")
        colon = line.find(":")
        if colon <= 0:
            raise HttpError(400, "malformed header line")
        name = line[:colon]
        if strict and _TOKEN.fullmatch(name) is None:
            raise HttpError(400, "malformed header name")
        headers.append((name.lower(), name, line[colon + 1 :].strip(" \t")))
    return headers


def _connection_tokens(headers: list[Header]) -> frozenset[str]:
    tokens: set[str] = set()
    for lower, _, value in headers:
        if lower == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return frozenset(tokens)


def _content_length(values: list[str], status: int) -> int:
    parts = {p.strip() for v in values for p in v.split(",")}
    if len(parts) != 1:
        raise HttpError(status, "conflicting Content-Length values")
    (text,) = parts
    if not text.isdigit() or len(text) > 18:
        raise HttpError(status, "malformed Content-Length")
    return int(text)


def parse_request(head: bytes) -> Head:
    lines = _lines(head)
    parts = lines[0].split(" ")
    if len(parts) != 3 or _TOKEN.fullmatch(parts[0]) is None or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are served")
    headers = _headers(lines[1:])
    request = Head((method, target, version), headers, connection_tokens=_connection_tokens(headers))
    encodings = request.get_all("transfer-encoding")
    lengths = request.get_all("content-length")
    if encodings:
        if lengths:
            raise HttpError(400, "Content-Length beside Transfer-Encoding is not accepted")
        if ",".join(encodings).replace(" ", "").lower() != "chunked":
            raise HttpError(501, "only the chunked transfer coding is supported in requests")
        request.framing = Framing.CHUNKED
    elif lengths:
        request.length = _content_length(lengths, 400)
        request.framing = Framing.LENGTH if request.length else Framing.NONE
    return request


def parse_response(head: bytes, request_method: str) -> tuple[Head, int]:
    """The response head and its status code; its framing follows RFC 9112 6.3."""
    lines = _lines(head)
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise HttpError(502, "the app answered something that is not HTTP/1.x")
    status = int(parts[1])
    headers = _headers(lines[1:], strict=False)
    response = Head((parts[0], parts[1], parts[2] if len(parts) == 3 else ""), headers, connection_tokens=_connection_tokens(headers))
    if request_method == "HEAD" or status < 200 or status in (204, 304):
        response.framing = Framing.NONE
        return response, status
    encodings = response.get_all("transfer-encoding")
    if encodings:
        last = ",".join(encodings).split(",")[-1].strip().lower()
        response.framing = Framing.CHUNKED if last == "chunked" else Framing.UNTIL_CLOSE
        return response, status
    lengths = response.get_all("content-length")
    if lengths:
        response.length = _content_length(lengths, 502)
        response.framing = Framing.LENGTH if response.length else Framing.NONE
    else:
        response.framing = Framing.UNTIL_CLOSE
    return response, status


class ChunkedScanner:
    """Finds where a chunked body ends in a byte stream, without decoding it."""

    SIZE, DATA, DATA_END, TRAILER, DONE = range(5)

    __slots__ = ("line", "remaining", "state")

    def __init__(self) -> None:
        self.state = self.SIZE
        self.remaining = 0
        self.line = bytearray()

    def feed(self, data: bytes | bytearray) -> int:
        """Consume `data`; the index just past the body's end in it, or -1 if the body goes on."""
        i, n = 0, len(data)
        while i < n:
            if self.state == self.DATA:
                take = min(self.remaining, n - i)
                i += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = self.DATA_END
                continue
            newline = data.find(b"\n", i)
            if newline < 0:
                self.line += data[i:]
                if len(self.line) > MAX_CHUNK_LINE:
                    raise HttpError(400, "chunk header line too long")
                return -1
            self.line += data[i:newline]
            i = newline + 1
            line = bytes(self.line)
            self.line.clear()
            if not line.endswith(b"\r"):
                raise HttpError(400, "chunk lines must end with CRLF")
            line = line[:-1]
            if self.state == self.SIZE:
                size = line.split(b";", 1)[0].strip(b" \t").decode("latin-1")
                if not size or len(size) > 16 or not all(c in _HEX for c in size):
                    raise HttpError(400, "malformed chunk size")
                self.remaining = int(size, 16)
                self.state = self.DATA if self.remaining else self.TRAILER
            elif self.state == self.DATA_END:
                if line:
                    raise HttpError(400, "missing CRLF after chunk data")
                self.state = self.SIZE
            elif not line:  # TRAILER: an empty line ends the body
                self.state = self.DONE
                return i
        return -1


async def relay_body(src: Buffered, dst: trio.socket.SocketType, framing: Framing, length: int) -> None:
    """Copy one message body from `src` to `dst` as it arrives; bytes past its end stay in `src.buf`."""
    if framing is Framing.NONE:
        return
    fair = Yielder()
    if framing is Framing.LENGTH:
        remaining = length
        if src.buf:
            data = src.take(remaining)
            remaining -= len(data)
            await send_all(dst, data)
        while remaining > 0:
            data = await recv_some(src.sock, min(remaining, RECV_SIZE))
            if not data:
                raise PeerClosed("the connection closed before the body was complete")
            remaining -= len(data)
            await send_all(dst, data)
            await fair.tick()
        return
    if framing is Framing.CHUNKED:
        scanner = ChunkedScanner()
        data = src.take()
        while True:
            if data:
                end = scanner.feed(data)
                if end >= 0:
                    src.buf += data[end:]
                    await send_all(dst, data[:end])
                    return
                await send_all(dst, data)
                await fair.tick()
            data = await recv_some(src.sock)
            if not data:
                raise PeerClosed("the connection closed before the chunked body was complete")
    # UNTIL_CLOSE
    if src.buf:
        await send_all(dst, src.take())
    while True:
        data = await recv_some(src.sock)
        if not data:
            return
        await send_all(dst, data)
        await fair.tick()
