"""Identifiers: UUIDs for most records, prefixed lowercase ULIDs for the rest (contract §3)."""

from __future__ import annotations

import secrets
import threading
import time
import uuid

from ulid import ULID

PREFIXES = ("dep", "ver", "svc", "proc", "wh", "del", "inv", "evt", "exec")


def new_uuid() -> str:
    return str(uuid.uuid4())


class MonotonicUlid:
    """ULIDs that strictly increase within this process, even within one millisecond."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def new(self) -> str:
        with self._lock:
            candidate = max(int(ULID()), int(time.time() * 1000) << 80)
            if candidate <= self._last:
                candidate = self._last + 1
            self._last = candidate
            return str(ULID.from_int(candidate)).lower()


_ulids = MonotonicUlid()


def new_ulid() -> str:
    """A ULID as 26 lowercase characters; text order is creation order in this process."""
    return _ulids.new()


def prefixed(prefix: str) -> str:
    """`dep_01j...`: a prefixed lowercase ULID."""
    return f"{prefix}_{new_ulid()}"


def is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower() and len(value) == 36
    except (ValueError, AttributeError, TypeError):
        return False


def random_token(nbytes: int = 32) -> str:
    """A URL-safe random string for keys, tickets and invite tokens."""
    return secrets.token_urlsafe(nbytes)
