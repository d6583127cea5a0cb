"""Slugs: DNS labels made from names (lowercase letters, digits and hyphens, <= 63)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

_NON_LABEL = re.compile(r"[^a-z0-9]+")
SLUG = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
"""A DNS label: what `is_slug` accepts, and the request schemas' `pattern`."""
SLUG_PATTERN = re.compile(f"^{SLUG}$")


def slugify(name: str, fallback: str = "item") -> str:
    slug = _NON_LABEL.sub("-", name.lower()).strip("-")[:63].strip("-")
    return slug or f"{fallback}-{secrets.token_hex(3)}"


def is_slug(value: str) -> bool:
    return bool(SLUG_PATTERN.match(value))


def free_slug(base: str, taken: Callable[[str], bool]) -> str:
    """`base`, or `base-2`, `base-3`, ... : the first that `taken` says is free."""
    candidate, n = base, 1
    while taken(candidate):
        n += 1
        candidate = f"{base[:58]}-{n}"
    return candidate
