"""PNG files of the screen's raw pixels, written inside the instance.

Why here and not on the control plane: a screen is about 4 MB of raw pixels and
about 20-100 kB as a PNG; compressing where the pixels are keeps those megabytes
off the wire and the control plane's CPU (the tenant's instance pays for its own
screenshots, as it did for `xwd`). Why not Pillow: the agent uses only the standard
library (it can import nothing once inside the instance's root); and a screen is
mostly flat colour, which deflate's fastest level compresses well with every row
unfiltered, so `zlib` alone writes it in a few milliseconds.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
COMPRESS_LEVEL = 1
CHANNELS = {"BGRX": (2, 1, 0), "XRGB": (1, 2, 3)}
"""Where red, green and blue sit in each 4-byte pixel of the two layouts."""


def png_of_pixels(pixels: bytes | bytearray, width: int, height: int, layout: str) -> bytes:
    """An 8-bit RGB PNG of `width` x `height` 32-bit pixels in `layout`."""
    if len(pixels) != width * height * 4:
        raise ValueError(f"{len(pixels)} bytes are not {width}x{height} 32-bit pixels")
    red, green, blue = CHANNELS[layout]
    rgb = bytearray(width * height * 3)
    rgb[0::3], rgb[1::3], rgb[2::3] = pixels[red::4], pixels[green::4], pixels[blue::4]
    stride = width * 3
    view = memoryview(rgb)
    rows = b"\0" + b"\0".join([view[start : start + stride] for start in range(0, len(rgb), stride)])  # filter 0
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, deflate, no interlace
    idat = zlib.compress(rows, COMPRESS_LEVEL)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
