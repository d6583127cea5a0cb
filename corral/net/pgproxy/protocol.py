"""The few PostgreSQL wire-protocol messages the proxy reads or writes.

Only the start of a connection matters to the proxy: the client's optional
SSLRequest/GSSENCRequest (answered `N`: connections to the proxy are plain; TLS is
the edge's), then its StartupMessage, whose `user`, `database` and `replication`
parameters it checks, and an ErrorResponse when it refuses. Everything after the
startup packet is relayed byte for byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
PROTOCOL_3 = 196608
MAX_STARTUP = 10_000
"""PostgreSQL's own limit on a startup packet's length."""


class ProtocolError(Exception):
    """The client sent something that is not a PostgreSQL startup."""


@dataclass(frozen=True)
class Startup:
    code: int
    raw: bytes
    """The packet as received (length included), to be sent on unchanged."""
    params: dict[str, str]


def header_length(header: bytes) -> int:
    (length,) = struct.unpack("!I", header)
    if length < 8 or length > MAX_STARTUP:
        raise ProtocolError(f"invalid startup packet length {length}")
    return length


def parse(raw: bytes) -> Startup:
    (code,) = struct.unpack("!I", raw[4:8])
    params: dict[str, str] = {}
    if code == PROTOCOL_3:
        parts = raw[8:].split(b"\x00")
        for key, value in zip(parts[0::2], parts[1::2], strict=False):
            if not key:
                break
            params[key.decode(errors="replace")] = value.decode(errors="replace")
    elif code >> 16 == 3:
        raise ProtocolError("unsupported protocol minor version")
    elif code not in (SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST):
        raise ProtocolError(f"unsupported protocol {code >> 16}.{code & 0xFFFF}")
    return Startup(code, raw, params)


def error_response(sqlstate: str, message: str, severity: str = "FATAL") -> bytes:
    """An ErrorResponse ('E') that libpq shows as `FATAL:  <message>`."""
    fields = b"".join(
        tag + value.encode() + b"\x00"
        for tag, value in ((b"S", severity), (b"V", severity), (b"C", sqlstate), (b"M", message))
    ) + b"\x00"
    return b"E" + struct.pack("!I", len(fields) + 4) + fields
