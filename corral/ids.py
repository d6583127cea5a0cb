"""Identifiers: UUIDs for most records, prefixed lowercase ULIDs for the rest (contract §3)."""

from __future__ import annotations

import secrets
import uuid

from ulid import ULID

PREFIXES = ("dep", "ver", "svc", "proc", "wh", "del", "inv", "evt", "exec")


def new_uuid() -> str:
    return str(uuid.uuid4())


def new_ulid() -> str:
    """A ULID as 26 lowercase characters; lexicographic order is creation order."""
    return str(ULID()).lower()


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
