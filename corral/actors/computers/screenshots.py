"""Screenshots: the X server's framebuffer, as the guest agent or `xwd` dumps it, to PNG.

The agent writes the PNG itself from its persistent X connection
(`corral.vm.agent.xdisplay`); what it sends is only checked here to be a PNG of the
size asked for (`png_size`: the agent runs in the tenant's instance).

`xwd -root` is the X tool that dumps the whole screen in one call; its format (X
Window Dump, a 100-byte header of big-endian 32-bit fields, the window name, a
colour map, then the pixels in the X server's byte order) is read here and the
pixels are handed to Pillow, which crops them. Pillow reads no XWD itself, so the
header is parsed by hand.

The PNG is written here, not by Pillow's PNG plugin: Pillow filters every row
adaptively (several passes over each row), which costs about twice what zlib alone
does on a screen; a screenshot is mostly flat colour that deflate's fastest level
compresses well unfiltered (filter type 0 on every row), so the file is within a
few percent of Pillow's at level 1 in half the time.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from PIL import Image

HEADER_FIELDS = 25
COLOR_ENTRY_BYTES = 12
ZPIXMAP = 2
PNG_COMPRESS_LEVEL = 1
"""Fast over small: a screenshot is taken to be looked at now, most of it flat colour."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class BadDump(ValueError):
    """The bytes are not a screen dump this module reads (a 24/32-bit TrueColor ZPixmap)."""


@dataclass(frozen=True)
class ScreenDump:
    width: int
    height: int
    image: Image.Image


def parse_xwd(data: bytes) -> ScreenDump:
    """The screen in `data` (an `xwd` dump of a 24-bit TrueColor display)."""
    if len(data) < HEADER_FIELDS * 4:
        raise BadDump("the dump is shorter than its header")
    fields = struct.unpack(">25I", data[: HEADER_FIELDS * 4])
    header_size, version, pixmap_format, _depth, width, height = fields[:6]
    byte_order, bits_per_pixel, bytes_per_line = fields[7], fields[11], fields[12]
    red_mask, green_mask, blue_mask = fields[14:17]
    ncolors = fields[19]
    if version != 7 or pixmap_format != ZPIXMAP or bits_per_pixel not in (24, 32):
        raise BadDump(f"unsupported dump: version {version}, format {pixmap_format}, {bits_per_pixel} bits per pixel")
    offset = header_size + ncolors * COLOR_ENTRY_BYTES
    pixels = data[offset : offset + bytes_per_line * height]
    if len(pixels) < bytes_per_line * height:
        raise BadDump("the dump ends before its last row")
    image = Image.frombuffer("RGB", (width, height), pixels, "raw", _raw_mode(bits_per_pixel, byte_order, red_mask, green_mask, blue_mask), bytes_per_line, 1)
    return ScreenDump(width, height, image)


def _raw_mode(bits_per_pixel: int, byte_order: int, red: int, green: int, blue: int) -> str:
    """Pillow's raw mode for the dump's pixel layout (LSBFirst is 0: B, G, R in memory)."""
    if (red, green, blue) != (0xFF0000, 0x00FF00, 0x0000FF):
        raise BadDump(f"unsupported colour masks {red:#x}/{green:#x}/{blue:#x}")
    little = byte_order == 0
    if bits_per_pixel == 32:
        return "BGRX" if little else "XRGB"
    return "BGR" if little else "RGB"


def png_size(data: bytes) -> tuple[int, int]:
    """The width and height a PNG's header declares; BadDump unless `data` starts as a PNG."""
    if len(data) < 33 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise BadDump("the agent's screenshot is not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def to_png(dump: ScreenDump, box: tuple[int, int, int, int] | None = None) -> bytes:
    """The PNG of the whole screen, or of `box` = (x, y, width, height) within it."""
    image = dump.image
    if box is not None:
        x, y, width, height = box
        image = image.crop((x, y, x + width, y + height))
    return encode_png(image)


def encode_png(image: Image.Image) -> bytes:
    """An 8-bit RGB PNG of `image`, each row unfiltered, deflated at `PNG_COMPRESS_LEVEL`."""
    width, height = image.size
    stride = width * 3
    pixels = Image.frombuffer("L", (stride, height), image.convert("RGB").tobytes(), "raw", "L", 0, 1)
    rows = Image.new("L", (stride + 1, height), 0)  # column 0: each row's filter type, 0
    rows.paste(pixels, (1, 0))
    compressed = zlib.compress(rows.tobytes(), PNG_COMPRESS_LEVEL)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, deflate, no interlace
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", compressed) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
