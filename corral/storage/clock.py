"""Timestamps as the store keeps them: fixed-width ISO 8601 UTC text that sorts."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_iso(moment: datetime) -> str:
    """`2026-11-22T06:00:00.123456Z`: always microseconds, so text order is time order."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_second_text: tuple[int, str] = (-1, "")
"""The last second formatted, up to its `.`: `utc_now_iso` runs several times a request."""


def utc_now_iso() -> str:
    """Now as `to_iso` writes it, with the second's text formatted once a second (a
    tenth of `strftime`'s cost)."""
    global _second_text
    microseconds = time.time_ns() // 1000
    second, fraction = divmod(microseconds, 1_000_000)
    cached_second, text = _second_text
    if cached_second != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
        _second_text = (second, text)
    return f"{text}{fraction:06d}Z"


def iso_in(seconds: float) -> str:
    return to_iso(utc_now() + timedelta(seconds=seconds))


def parse_iso(text: str) -> datetime:
    """Parse RFC 3339 / ISO 8601 (with `Z` or an offset); naive values are taken as UTC."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
