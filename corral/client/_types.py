"""The `UNSET` marker: an optional body field the caller did not give is left out of the
request, so the server applies its own default (and a PATCH leaves the field alone)."""

from __future__ import annotations

from typing import Any

__all__ = ["UNSET", "Unset", "without_unset"]


class Unset:
    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


def without_unset(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not UNSET}
