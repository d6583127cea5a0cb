"""Screenshots on the control plane: the PNG writer of the `xwd` fallback, and the
check of the PNG an agent sends (it runs in the tenant's instance: junk is refused)."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from corral.actors.computers.screenshots import (
    BadDump,
    ScreenDump,
    encode_png,
    parse_xwd,
    png_size,
    to_png,
)
from corral.vm.agent.pngwrite import png_of_pixels


def xwd_dump(width: int, height: int, pixels: bytes) -> bytes:
    name = b"root\0"
    fields = [100 + len(name), 7, 2, 24, width, height, 0, 0, 32, 0, 32, 32, width * 4, 4, 0xFF0000, 0x00FF00, 0x0000FF, 8, 256, 0, width, height, 0, 0, 0]
    return struct.pack(">25I", *fields) + name + pixels


def test_the_xwd_fallback_writes_the_screen_and_a_box() -> None:
    pixels = b"".join(bytes((x, y, 7, 0)) for y in range(3) for x in range(5))  # B, G, R, X
    dump = parse_xwd(xwd_dump(5, 3, pixels))
    image = Image.open(io.BytesIO(to_png(dump)))
    assert image.size == (5, 3) and image.getpixel((4, 2)) == (7, 2, 4)
    box = Image.open(io.BytesIO(to_png(dump, (1, 1, 2, 2))))
    assert box.size == (2, 2) and box.getpixel((0, 0)) == (7, 1, 1)


def test_encode_png_matches_the_image() -> None:
    image = Image.new("RGB", (300, 200), (48, 80, 110))
    image.paste((255, 255, 255), (10, 10, 120, 90))
    decoded = Image.open(io.BytesIO(encode_png(image)))
    assert decoded.mode == "RGB" and decoded.tobytes() == image.tobytes()


def test_png_size_reads_the_agents_png() -> None:
    assert png_size(png_of_pixels(bytes(4 * 6), 3, 2, "BGRX")) == (3, 2)
    assert png_size(encode_png(ScreenDump(1, 1, Image.new("RGB", (9, 4))).image)) == (9, 4)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x89PNG\r\n\x1a\n", b"GIF89a" + b"\0" * 40, b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDX" + b"\0" * 30, b"\xff" * 10_000],
)
def test_junk_is_not_a_png(data: bytes) -> None:
    with pytest.raises(BadDump):
        png_size(data)

