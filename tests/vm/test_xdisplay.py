"""The agent's persistent X connection, against a small fake X server on a Unix socket.

The real X server (Xvnc in the desktop template) is exercised through the API in
tests/http/test_computers_desktop.py; this one checks the wire format, the order of
input events, the screen's pixels as PNG, and that junk from the display is refused.
"""

from __future__ import annotations

import io
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from PIL import Image

from corral.vm.agent import xdisplay
from corral.vm.agent.errors import AgentError
from corral.vm.agent.pngwrite import png_of_pixels

ROOT, VISUAL, XTEST = 0x1A5, 0x21, 140
WIDTH, HEIGHT = 8, 4


def setup_reply(*, depth: int = 24, red: int = 0xFF0000) -> bytes:
    vendor = b"fake"
    body = struct.pack("<IIIIHHBBBBBBBBxxxx", 1, 0x400000, 0x1FFFFF, 0, len(vendor), 65535, 1, 1, 0, 0, 32, 32, 8, 255)
    body += vendor + struct.pack("<BBBxxxxx", 24, 32, 32)
    body += struct.pack("<IIIIIHHHHHHIBBBB", ROOT, 0x20, 0xFFFFFF, 0, 0, WIDTH, HEIGHT, 100, 100, 1, 1, VISUAL, 0, 0, depth, 1)
    body += struct.pack("<BxHxxxx", depth, 1) + struct.pack("<IBBHIIIxxxx", VISUAL, 4, 8, 256, red, 0x00FF00, 0x0000FF)
    return struct.pack("<BxHHH", 1, 11, 0, len(body) // 4) + body


def pixel(x: int, y: int) -> bytes:
    return bytes((x * 10, y * 20, 200, 0))  # B, G, R, X


class FakeX:
    """Answers the requests the agent sends; records XTEST input as (type, detail, x, y)."""

    def __init__(self) -> None:
        self.inputs: list[tuple[int, int, int, int]] = []
        self.pointer = (0, 0)
        self.setup = setup_reply()
        self.image_error = False
        self.image_extra = 0
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = bytearray()

        async def take(n: int) -> bytes:
            while len(buffer) < n:
                data = await stream.receive_some(65536)
                if not data:
                    raise EOFError
                buffer.extend(data)
            out = bytes(buffer[:n])
            del buffer[:n]
            return out

        sequence = 0
        try:
            await take(12)
            await stream.send_all(self.setup)
            while True:
                head = await take(4)
                opcode, data, length = head[0], head[1], struct.unpack("<H", head[2:])[0]
                body = await take(4 * length - 4)
                sequence += 1
                await stream.send_all(self.answer(opcode, data, body, sequence))
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            return

    def answer(self, opcode: int, data: int, body: bytes, sequence: int) -> bytes:
        def reply(payload: bytes = b"", extra: bytes = b"", first: int = 0) -> bytes:
            return struct.pack("<BBHI", 1, first, sequence & 0xFFFF, len(extra) // 4) + payload.ljust(24, b"\0") + extra

        if opcode == xdisplay.QUERY_EXTENSION:
            return reply(struct.pack("<BB", 1, XTEST))
        if opcode == XTEST and data == xdisplay.XTEST_FAKE_INPUT:
            kind, detail = body[0], body[1]
            x, y = struct.unpack_from("<hh", body, 20)
            self.inputs.append((kind, detail, x, y))
            if kind == xdisplay.MOTION_NOTIFY:
                self.pointer = (x, y)
            return b""
        if opcode == xdisplay.GET_INPUT_FOCUS:
            return reply()
        if opcode == xdisplay.QUERY_POINTER:
            return reply(struct.pack("<IIhh", ROOT, 0, *self.pointer), first=1)
        if opcode == xdisplay.GET_GEOMETRY:
            return reply(struct.pack("<IhhHH", ROOT, 0, 0, WIDTH, HEIGHT))
        if opcode == xdisplay.GET_IMAGE:
            _, x, y, width, height = struct.unpack_from("<IhhHH", body)
            if self.image_error or x + width > WIDTH or y + height > HEIGHT:
                return struct.pack("<BBHIHB", 0, 8, sequence & 0xFFFF, 0, 0, opcode).ljust(32, b"\0")
            pixels = b"".join(pixel(x + i, y + j) for j in range(height) for i in range(width))
            return reply(struct.pack("<I", VISUAL), pixels + b"\0" * self.image_extra, first=24)
        return struct.pack("<BBHIHB", 0, 1, sequence & 0xFFFF, 0, 0, opcode).ljust(32, b"\0")


@pytest.fixture
async def fake_x(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeX]:
    monkeypatch.setattr(xdisplay, "SOCKET_DIR", str(tmp_path))
    monkeypatch.setattr(xdisplay, "IO_TIMEOUT", 1.0)  # a display that stops mid-reply
    server = FakeX()
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(str(tmp_path / "X5"))
    sock.listen(8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, server.serve, [trio.SocketListener(sock)])
        yield server
        nursery.cancel_scope.cancel()


async def test_a_click_is_a_move_a_press_and_a_release_in_order(fake_x: FakeX) -> None:
    displays = xdisplay.Displays()
    steps = xdisplay.parse_steps([{"move": [5, 3]}, {"button": 1, "down": True}, {"button": 1, "down": False}])
    assert await displays.input(":5", steps) == (5, 3)
    assert fake_x.inputs == [(6, 0, 5, 3), (4, 1, 0, 0), (5, 1, 0, 0)]
    # The same connection serves the next action.
    assert await displays.input(":5", xdisplay.parse_steps([{"sleep_ms": 1}, {"move": [1, 2]}])) == (1, 2)
    assert fake_x.connections == 1


async def test_the_screen_and_a_rectangle_as_png(fake_x: FakeX) -> None:
    displays = xdisplay.Displays()
    pixels, width, height, layout = await displays.capture(":5", None)
    assert (width, height, layout) == (WIDTH, HEIGHT, "BGRX")
    image = Image.open(io.BytesIO(png_of_pixels(pixels, width, height, layout)))
    assert image.size == (WIDTH, HEIGHT) and image.mode == "RGB"
    assert image.getpixel((3, 2)) == (200, 40, 30)
    pixels, width, height, layout = await displays.capture(":5", (2, 1, 3, 2))
    image = Image.open(io.BytesIO(png_of_pixels(pixels, width, height, layout)))
    assert image.size == (3, 2) and image.getpixel((0, 0)) == (200, 20, 20)


async def test_an_x_error_is_a_desktop_error_and_keeps_the_connection(fake_x: FakeX) -> None:
    displays = xdisplay.Displays()
    with pytest.raises(xdisplay.XError, match="BadMatch"):
        await displays.capture(":5", (6, 0, 5, 1))
    assert (await displays.capture(":5", (0, 0, 1, 1)))[1:3] == (1, 1)
    assert fake_x.connections == 1


async def test_a_reply_larger_than_asked_drops_the_connection(fake_x: FakeX) -> None:
    displays = xdisplay.Displays()
    fake_x.image_extra = 4096
    with pytest.raises(xdisplay.DisplayUnavailable, match="larger"):
        await displays.capture(":5", (0, 0, 2, 2))
    fake_x.image_extra = 0
    assert (await displays.capture(":5", (0, 0, 2, 2)))[1:3] == (2, 2)
    assert fake_x.connections == 2


@pytest.mark.parametrize(
    "setup",
    [
        setup_reply(depth=16),
        setup_reply(red=0xF800),
    ],
)
async def test_a_screen_of_another_layout_is_not_captured(fake_x: FakeX, setup: bytes) -> None:
    fake_x.setup = setup
    with pytest.raises(xdisplay.DisplayUnavailable, match="TrueColor"):
        await xdisplay.Displays().capture(":5", None)


@pytest.mark.parametrize(
    "setup",
    [
        b"\0\x05\x0b\0\0\0\x02\0refused\0",  # failed, with a reason
        b"\x01\0\x0b\0\0\0\x04\0" + b"\xff" * 16,  # success, but a truncated body
        b"\x01\0\x0b\0\0\0\xff\xff" + b"\0" * 100,  # claims 256 kB, then closes
        setup_reply()[:8] + b"\xff" * (len(setup_reply()) - 8),  # junk fields
    ],
)
async def test_junk_from_the_display_is_display_unavailable(fake_x: FakeX, setup: bytes) -> None:
    fake_x.setup = setup
    with pytest.raises(xdisplay.DisplayUnavailable):
        await xdisplay.Displays().input(":5", [])


async def test_no_display_is_display_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xdisplay, "SOCKET_DIR", str(tmp_path))
    with pytest.raises(xdisplay.DisplayUnavailable) as caught:
        await xdisplay.Displays().input(":7", [])
    assert caught.value.status == 503 and caught.value.code == "DISPLAY_UNAVAILABLE"


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ("click", "steps must be a list"),
        ([{"move": [1]}], "move must be"),
        ([{"move": [-1, 0]}], "x must be"),
        ([{"move": [True, 0]}], "x must be"),
        ([{"button": 0}], "button must be"),
        ([{"sleep_ms": 5000}], "sleep_ms must be"),
        ([{"warp": 1}], "a step is"),
        ([{"sleep_ms": 0}] * (xdisplay.MAX_STEPS + 1), "at most"),
    ],
)
def test_steps_are_checked(steps: object, problem: str) -> None:
    with pytest.raises(AgentError, match=problem):
        xdisplay.parse_steps(steps)


@pytest.mark.parametrize("display", ["0", ":x", "host:0", ":0.1.2", ""])
def test_only_local_displays(display: str) -> None:
    with pytest.raises(AgentError, match="not a local display"):
        xdisplay.socket_path(display)


def test_png_layouts() -> None:
    pixels = bytes((1, 2, 3, 0, 4, 5, 6, 0))
    def convert(layout: str) -> object:
        return Image.open(io.BytesIO(png_of_pixels(pixels, 2, 1, layout))).getpixel((1, 0))
    assert convert("BGRX") == (6, 5, 4)
    assert convert("XRGB") == (5, 6, 0)
    with pytest.raises(ValueError):
        png_of_pixels(pixels, 3, 1, "BGRX")


async def test_the_agent_routes_desktop_requests_here(fake_x: FakeX) -> None:
    from corral.vm.agent.app import Agent, AgentConfig
    from corral.vm.agent.httpserver import Request

    async with trio.open_nursery() as nursery:
        agent = Agent(AgentConfig("127.0.0.1", 0, "token"), nursery)
        auth = {"authorization": "Bearer token"}
        body = b'{"display": ":5", "steps": [{"move": [2, 1]}]}'
        moved = await agent.handle(Request("POST", "/desktop/input", {}, auth, body))
        assert moved.status == 200 and moved.body == b'{"x": 2, "y": 1}'
        shot = await agent.handle(Request("GET", "/desktop/screen", {"display": ":5", "x": "0", "y": "0", "width": "2", "height": "1"}, auth, b""))
        assert shot.headers["content-type"] == "image/png"
        assert Image.open(io.BytesIO(shot.body)).size == (2, 1)
        nursery.cancel_scope.cancel()
