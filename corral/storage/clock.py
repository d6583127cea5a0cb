"""Timestamps as the store keeps them: fixed-width ISO 8601 UTC text that sorts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_iso(moment: datetime) -> str:
    """`2026-11-22T06:00:00.123456Z`: always microseconds, so text order is time order."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_now_iso() -> str:
    return to_iso(utc_now())


def iso_in(seconds: float) -> str:
    return to_iso(utc_now() + timedelta(seconds=seconds))


def parse_iso(text: str) -> datetime:
    """Parse RFC 3339 / ISO 8601 (with `Z` or an offset); naive values are taken as UTC."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
