"""The exec timeout every instance kind applies (specification, Limits: default 30 s,
maximum 300 s, clamped, not refused)."""

from __future__ import annotations

from typing import Any

from corral.errors import validation_error

EXEC_DEFAULT_TIMEOUT = 30
EXEC_MAX_TIMEOUT = 300


def clamp_timeout(value: Any) -> int:
    """Whole seconds: 30 when absent, at most 300, at least 1; not a positive number is 422."""
    if value is None:
        return EXEC_DEFAULT_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise validation_error({"timeout": "must be a positive number of seconds"})
    return max(1, int(min(value, EXEC_MAX_TIMEOUT)))
