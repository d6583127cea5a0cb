"""Desktop control over one persistent connection to the instance's X server.

Why: running `xdotool` or `xwd` per action pays a process start, Xlib's set-up and
a connection handshake every time (about 5 ms a click, 23 ms a screen dump, plus
a file to write and read back). The agent instead keeps one connection per display
open and sends the few requests desktop control needs: XTEST's FakeInput (pointer
and buttons, as xdotool does), QueryPointer, GetGeometry and GetImage (the screen,
as xwd does), and GetInputFocus as the fence that makes every action answered
only once the X server has applied it.

Why not python-xlib or libX11 through ctypes: the agent runs forked from the
zygote on the host's Python and imports nothing once it has entered the instance's
root (it uses only the standard library and trio), and loading the instance's own
libX11 would put native code the tenant can replace into the agent. The X11 wire
protocol for these requests is a few fixed-size structs, spoken here over the
display's Unix socket (`/tmp/.X11-unix/X<n>`; Xvnc runs with `-ac`, so no cookie).

Routes (see `app`): `POST /desktop/input` runs `steps` (`{"move": [x, y]}`,
`{"button": n, "down": bool}`, `{"sleep_ms": n}`) and answers where the pointer is
afterwards; `GET /desktop/screen` answers a rectangle of the screen (the whole
screen without `width`/`height`) as a PNG (`pngwrite`). A display that does not answer, or speaks something else, is `503 DISPLAY_UNAVAILABLE`: the control
plane then falls back to the X tools.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import trio

from .errors import AgentError
from .httpserver import Request, Response, json_response
from .pngwrite import png_of_pixels

SOCKET_DIR = "/tmp/.X11-unix"
DISPLAY_PATTERN = re.compile(r":(\d{1,4})(?:\.(\d{1,2}))?")
IO_TIMEOUT = 10.0
"""Longest an X request may take, sleeps of the steps aside."""
MAX_STEPS = 1000
MAX_SLEEP_MS = 1000
MAX_COORDINATE = 32767
MAX_SETUP_BYTES = 1 << 20
MAX_IMAGE_BYTES = 256 << 20
"""A reply claiming more than this is not the image that was asked for."""

# Core requests and XTEST's FakeInput.
QUERY_POINTER, GET_GEOMETRY, GET_INPUT_FOCUS, GET_IMAGE, QUERY_EXTENSION = 38, 14, 43, 73, 98
XTEST_FAKE_INPUT = 2
BUTTON_PRESS, BUTTON_RELEASE, MOTION_NOTIFY = 4, 5, 6
Z_PIXMAP = 2
TRUE_COLOR = 4
GENERIC_EVENT = 35
ERROR_NAMES = {1: "BadRequest", 2: "BadValue", 3: "BadWindow", 8: "BadMatch", 9: "BadDrawable", 11: "BadAlloc", 16: "BadLength"}


class DisplayUnavailable(AgentError):
    def __init__(self, message: str) -> None:
        super().__init__(503, "DISPLAY_UNAVAILABLE", message)


class XError(AgentError):
    """The X server refused a request (a rectangle off the screen is BadMatch)."""

    def __init__(self, code: int, opcode: int) -> None:
        super().__init__(500, "DESKTOP_ERROR", f"the X server answered {ERROR_NAMES.get(code, f'error {code}')} to request {opcode}")


@dataclass(frozen=True)
class Screen:
    """What the connection set-up says about the screen and its pixels."""

    root: int
    pixel_format: str | None
    """`BGRX` or `XRGB` for a 24-bit TrueColor root with 32-bit pixels; None for any
    other layout (the screen is then not captured here)."""


def socket_path(display: str) -> tuple[str, int]:
    match = DISPLAY_PATTERN.fullmatch(display)
    if match is None:
        raise AgentError(422, "VALIDATION_ERROR", f"not a local display: {display!r}")
    return f"{SOCKET_DIR}/X{int(match[1])}", int(match[2] or 0)


def _pad(n: int) -> int:
    return (4 - n % 4) % 4


def parse_setup(data: bytes | bytearray, screen_number: int) -> Screen:
    """The chosen screen of a successful set-up reply's body (after its 8-byte head)."""
    try:
        vendor_length, = struct.unpack_from("<H", data, 16)
        n_screens, n_formats, byte_order = data[20], data[21], data[22]
        offset = 32 + vendor_length + _pad(vendor_length)
        bpp_of = {}
        for _ in range(n_formats):
            depth, bpp = data[offset], data[offset + 1]
            bpp_of[depth] = bpp
            offset += 8
        if screen_number >= n_screens:
            raise DisplayUnavailable(f"the display has no screen {screen_number}")
        for number in range(n_screens):
            root, = struct.unpack_from("<I", data, offset)
            root_visual, = struct.unpack_from("<I", data, offset + 32)
            root_depth, n_depths = data[offset + 38], data[offset + 39]
            offset += 40
            masks = None
            for _ in range(n_depths):
                depth, n_visuals = data[offset], struct.unpack_from("<H", data, offset + 2)[0]
                offset += 8
                for _ in range(n_visuals):
                    visual, klass = struct.unpack_from("<IB", data, offset)
                    if visual == root_visual and depth == root_depth:
                        masks = (klass, *struct.unpack_from("<III", data, offset + 8))
                    offset += 24
            if number == screen_number:
                layout = None
                if root_depth == 24 and bpp_of.get(24) == 32 and masks == (TRUE_COLOR, 0xFF0000, 0x00FF00, 0x0000FF):
                    layout = "XRGB" if byte_order else "BGRX"
                return Screen(root, layout)
    except (struct.error, IndexError) as exc:
        raise DisplayUnavailable("the display's set-up reply is malformed") from exc
    raise DisplayUnavailable("the display's set-up reply is malformed")


class XConnection:
    """One open connection: requests go out in order and each call reads up to its reply."""

    def __init__(self, sock: trio.socket.SocketType, screen: Screen, xtest: int) -> None:
        self.sock = sock
        self.screen = screen
        self.xtest = xtest
        self.sequence = 0

    @classmethod
    async def open(cls, display: str) -> XConnection:
        path, screen_number = socket_path(display)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.connect(path)
            await sock.send(struct.pack("<BxHHHHxx", 0x6C, 11, 0, 0, 0))  # little-endian, X11.0, no auth
            head = await _read_exactly(sock, 8)
            status, length = head[0], struct.unpack_from("<H", head, 6)[0]
            if 4 * length > MAX_SETUP_BYTES:
                raise DisplayUnavailable("the display's set-up reply is too large")
            body = await _read_exactly(sock, 4 * length)
            if status != 1:
                reason = body[: head[1]].decode("latin-1", "replace") if status == 0 else "it asks for authentication"
                raise DisplayUnavailable(f"the display refused the connection: {reason}")
            connection = cls(sock, parse_setup(body, screen_number), 0)
            connection.xtest = await connection.extension_opcode(b"XTEST")
        except OSError as exc:
            sock.close()
            raise DisplayUnavailable(f"cannot connect to display {display}: {exc.strerror or exc}") from exc
        except BaseException:
            sock.close()
            raise
        return connection

    def close(self) -> None:
        self.sock.close()

    async def extension_opcode(self, name: bytes) -> int:
        request = struct.pack("<BxHHxx", QUERY_EXTENSION, 2 + (len(name) + _pad(len(name))) // 4, len(name))
        reply, _ = await self.request([request + name + b"\0" * _pad(len(name))])
        if not reply[8]:
            raise DisplayUnavailable(f"the X server has no {name.decode()} extension")
        return reply[9]

    async def request(self, requests: list[bytes], max_extra: int = 0) -> tuple[bytearray, bytearray]:
        """Send `requests` (the last one has a reply) and return that reply's 32-byte
        head and its extra data (at most `max_extra` bytes). The first X error among
        them is raised once the reply (or the last request's error) has arrived."""
        await self.sock.send(b"".join(requests))
        self.sequence = (self.sequence + len(requests)) & 0xFFFF
        error: XError | None = None
        while True:
            head = await _read_exactly(self.sock, 32)
            kind, sequence = head[0], struct.unpack_from("<H", head, 2)[0]
            if kind == 0:
                error = error or XError(head[1], head[10])
                if sequence == self.sequence:
                    raise error
                continue
            extra_length = 4 * struct.unpack_from("<I", head, 4)[0] if kind in (1, GENERIC_EVENT) else 0
            if kind == 1 and sequence == self.sequence:
                if extra_length > max_extra:
                    raise DisplayUnavailable("the X server's reply is larger than what was asked for")
                extra = await _read_exactly(self.sock, extra_length)
                if error is not None:
                    raise error
                return head, extra
            if extra_length > MAX_SETUP_BYTES:
                raise DisplayUnavailable("the X server sent an unexpected large message")
            await _read_exactly(self.sock, extra_length)  # an event or a stray reply: skipped

    def fake_input(self, kind: int, detail: int, x: int = 0, y: int = 0) -> bytes:
        root = self.screen.root if kind == MOTION_NOTIFY else 0
        return struct.pack("<BBHBBxxIIIIhhIHBB", self.xtest, XTEST_FAKE_INPUT, 9, kind, detail, 0, root, 0, 0, x, y, 0, 0, 0, 0)

    async def pointer(self) -> tuple[int, int]:
        reply, _ = await self.request([struct.pack("<BxHI", QUERY_POINTER, 2, self.screen.root)])
        x, y = struct.unpack_from("<hh", reply, 16)
        return x, y

    async def sync(self, pending: list[bytes]) -> None:
        """Send `pending` and wait until the server has processed them."""
        await self.request([*pending, struct.pack("<BxH", GET_INPUT_FOCUS, 1)])

    async def size(self) -> tuple[int, int]:
        reply, _ = await self.request([struct.pack("<BxHI", GET_GEOMETRY, 2, self.screen.root)])
        width, height = struct.unpack_from("<HH", reply, 16)
        return width, height

    async def image(self, x: int, y: int, width: int, height: int) -> bytearray:
        """The rectangle's pixels, 4 bytes each, rows packed (32-bit pixels need no padding)."""
        expected = width * height * 4
        request = struct.pack("<BBHIhhHHI", GET_IMAGE, Z_PIXMAP, 5, self.screen.root, x, y, width, height, 0xFFFFFFFF)
        _, data = await self.request([request], max_extra=expected)
        if len(data) != expected:
            raise DisplayUnavailable("the X server's image is not the size asked for")
        return data


async def _read_exactly(sock: trio.socket.SocketType, n: int) -> bytearray:
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        count = await sock.recv_into(view[got:], n - got)
        if count == 0:
            raise DisplayUnavailable("the X server closed the connection")
        got += count
    return buffer


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise AgentError(422, "VALIDATION_ERROR", f"{name} must be an integer from {low} to {high}")
    return value


def parse_steps(steps: Any) -> list[tuple[str, int, int]]:
    """The request's steps as (kind, a, b): ("move", x, y), ("button", n, down), ("sleep", ms, 0)."""
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise AgentError(422, "VALIDATION_ERROR", f"steps must be a list of at most {MAX_STEPS}")
    parsed = []
    for step in steps:
        if not isinstance(step, dict):
            raise AgentError(422, "VALIDATION_ERROR", "each step must be an object")
        if "move" in step:
            point = step["move"]
            if not isinstance(point, list) or len(point) != 2:
                raise AgentError(422, "VALIDATION_ERROR", "move must be [x, y]")
            parsed.append(("move", _int(point[0], "x", 0, MAX_COORDINATE), _int(point[1], "y", 0, MAX_COORDINATE)))
        elif "button" in step:
            parsed.append(("button", _int(step["button"], "button", 1, 255), int(bool(step.get("down")))))
        elif "sleep_ms" in step:
            parsed.append(("sleep", _int(step["sleep_ms"], "sleep_ms", 0, MAX_SLEEP_MS), 0))
        else:
            raise AgentError(422, "VALIDATION_ERROR", "a step is move, button or sleep_ms")
    return parsed


class Displays:
    """The agent's open connections, one per display, each used by one request at a time.

    A connection that fails in any way is closed and the next request opens a new one
    (the X server restarted, a snapshot was restored)."""

    def __init__(self) -> None:
        self._connections: dict[str, XConnection] = {}
        self._locks: dict[str, trio.Lock] = {}

    async def _use(self, display: str) -> XConnection:
        connection = self._connections.get(display)
        if connection is None:
            connection = self._connections[display] = await XConnection.open(display)
        return connection

    def _drop(self, display: str) -> None:
        connection = self._connections.pop(display, None)
        if connection is not None:
            connection.close()

    @contextlib.asynccontextmanager
    async def _session(self, display: str, limit: float) -> AsyncIterator[XConnection]:
        """The display's connection for one request, within `limit` seconds; a failure
        other than the X server's own refusal drops it (its stream's state is unknown)."""
        async with self._locks.setdefault(display, trio.Lock()):
            try:
                with trio.fail_after(limit):
                    yield await self._use(display)
            except XError:
                raise
            except (AgentError, OSError, trio.TooSlowError) as exc:
                self._drop(display)
                if isinstance(exc, AgentError):
                    raise
                raise DisplayUnavailable(f"the display stopped answering: {exc!r}") from exc
            except BaseException:
                self._drop(display)  # cancelled mid-request
                raise

    async def input(self, display: str, steps: list[tuple[str, int, int]]) -> tuple[int, int]:
        """Run the steps; where the pointer is afterwards."""
        limit = IO_TIMEOUT + sum(a for kind, a, _ in steps if kind == "sleep") / 1000
        async with self._session(display, limit) as connection:
            pending: list[bytes] = []
            for kind, a, b in steps:
                if kind == "move":
                    pending.append(connection.fake_input(MOTION_NOTIFY, 0, a, b))
                elif kind == "button":
                    pending.append(connection.fake_input(BUTTON_PRESS if b else BUTTON_RELEASE, a))
                else:
                    await connection.sync(pending)  # what came before the pause happens before it
                    pending = []
                    await trio.sleep(a / 1000)
            await connection.sync(pending)
            return await connection.pointer()

    async def capture(self, display: str, box: tuple[int, int, int, int] | None) -> tuple[bytearray, int, int, str]:
        """The pixels of `box` (x, y, width, height), or of the whole screen, with their size and layout."""
        async with self._session(display, IO_TIMEOUT) as connection:
            layout = connection.screen.pixel_format
            if layout is None:
                raise DisplayUnavailable("the screen's pixels are not 24-bit TrueColor in 32 bits")
            x, y, width, height = box if box is not None else (0, 0, *await connection.size())
            if width * height * 4 > MAX_IMAGE_BYTES:
                raise AgentError(422, "VALIDATION_ERROR", "the rectangle is too large")
            return await connection.image(x, y, width, height), width, height, layout


class DesktopRoutes:
    """The agent's desktop routes over one `Displays`."""

    def __init__(self) -> None:
        self.displays = Displays()

    async def input(self, request: Request) -> Response:
        body = request.json()
        display = str(body.get("display") or ":0")
        x, y = await self.displays.input(display, parse_steps(body.get("steps") or []))
        return json_response({"x": x, "y": y})

    async def screen(self, request: Request) -> Response:
        query = request.query
        box = None
        if "width" in query or "height" in query:
            try:
                values = [int(query.get(name, "")) for name in ("x", "y", "width", "height")]
            except ValueError as exc:
                raise AgentError(422, "VALIDATION_ERROR", "x, y, width and height must be integers") from exc
            x, y, width, height = values
            box = (
                _int(x, "x", 0, MAX_COORDINATE),
                _int(y, "y", 0, MAX_COORDINATE),
                _int(width, "width", 1, 65535),
                _int(height, "height", 1, 65535),
            )
        pixels, width, height, layout = await self.displays.capture(query.get("display") or ":0", box)
        png = await trio.to_thread.run_sync(png_of_pixels, pixels, width, height, layout)
        return Response(200, png, {"content-type": "image/png"})
