"""Identifiers: UUIDs for most records, prefixed lowercase ULIDs for the rest (contract §3)."""

from __future__ import annotations

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


_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
"""Every 10-bit value as its two Crockford symbols."""


class MonotonicUlid:
    """ULIDs that strictly increase within this process, even within one millisecond.

    The ULID specification's monotonic form: 48-bit milliseconds, then 80 random bits
    drawn once a millisecond and incremented for each further id within it (and
    while the clock stands or steps back). Encoded directly, ten symbols of time kept
    for the millisecond and the rest two symbols a lookup: an id costs about a
    microsecond, and a request makes several (its id, events, audit row).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._random = 0
        self._time_text = ""
        self._entropy = b""
        self._used = 0

    def _fresh_random(self) -> int:
        """80 bits from the operating system's generator, drawn 400 ids at a time: each
        `os.urandom` lets go of the GIL, and a thread waiting for it then costs the
        event loop its switch interval, several times a request (issue 28)."""
        if self._used + 10 > len(self._entropy):
            self._entropy, self._used = os.urandom(4000), 0
        start, self._used = self._used, self._used + 10
        return int.from_bytes(self._entropy[start : self._used], "big")

    def new(self) -> str:
        ms = time.time_ns() // 1_000_000
        with self._lock:
            if ms > self._ms:
                self._ms = ms
                self._random = self._fresh_random()
                self._time_text = _encode(ms, 10)
            else:
                self._random += 1
                if self._random >> 80:  # 2**80 ids in one millisecond: borrow the next one
                    self._ms += 1
                    self._random = 0
                    self._time_text = _encode(self._ms, 10)
            time_text, random = self._time_text, self._random
        p = _PAIRS
        return (time_text + p[random >> 70 & 1023] + p[random >> 60 & 1023] + p[random >> 50 & 1023] + p[random >> 40 & 1023]
                + p[random >> 30 & 1023] + p[random >> 20 & 1023] + p[random >> 10 & 1023] + p[random & 1023])


def _encode(value: int, symbols: int) -> str:
    return "".join(_CROCKFORD[(value >> (5 * (symbols - 1 - i))) & 31] for i in range(symbols))


_ulids = MonotonicUlid()
os.register_at_fork(after_in_child=lambda: setattr(_ulids, "_entropy", b""))  # a child never reuses the parent's draw


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
