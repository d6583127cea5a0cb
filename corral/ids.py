"""Identifiers: UUIDs for most records, prefixed lowercase ULIDs for the rest (contract §3)."""

from __future__ import annotations

import base64
import os
import re
import secrets
import threading
import time
import uuid

PREFIXES = ("dep", "ver", "svc", "proc", "wh", "del", "inv", "evt", "exec")


def new_uuid() -> str:
    return str(uuid.uuid4())


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_TO_CROCKFORD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD)


class MonotonicUlid:
    """ULIDs that strictly increase within this process, even within one millisecond.

    Encoded directly (48-bit milliseconds, 80 random bits, Crockford base32): about
    ten times cheaper than building `ulid.ULID` objects, and this runs on every request.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def new(self) -> str:
        candidate = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
        with self._lock:
            if candidate <= self._last:
                candidate = self._last + 1
            self._last = candidate
        # 128 bits in 20 bytes: base32 gives 32 symbols of which the first 6 are the
        # 30 zero bits in front; the other 26, in Crockford's alphabet, are the ULID.
        return base64.b32encode(candidate.to_bytes(20, "big"))[6:].decode().translate(_TO_CROCKFORD)


_ulids = MonotonicUlid()


def new_ulid() -> str:
    """A ULID as 26 lowercase characters; text order is creation order in this process."""
    return _ulids.new()


def prefixed(prefix: str) -> str:
    """`dep_01j...`: a prefixed lowercase ULID."""
    return f"{prefix}_{new_ulid()}"


UUID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
"""What `is_uuid` accepts (the hyphenated form, in either case), as a regular expression."""


_UUID = re.compile(UUID_PATTERN)


def is_uuid(value: str) -> bool:
    return isinstance(value, str) and _UUID.fullmatch(value) is not None


def random_token(nbytes: int = 32) -> str:
    """A URL-safe random string for keys, tickets and invite tokens."""
    return secrets.token_urlsafe(nbytes)
