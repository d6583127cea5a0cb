"""The `UNSET` marker: an optional body field the caller did not give is left out of the
request, so the server applies its own default (and a PATCH leaves the field alone).
It is the server's own marker (`corral.models`), so both sides mean the same by it."""

from __future__ import annotations

from typing import Any

from corral.models import UNSET, Unset

__all__ = ["UNSET", "Unset", "without_unset"]


def without_unset(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not UNSET}
