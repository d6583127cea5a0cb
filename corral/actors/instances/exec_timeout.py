"""The exec timeout every instance kind applies (specification, Limits: default 30 s,
maximum 300 s, clamped, not refused)."""

from __future__ import annotations

from typing import Annotated, Any

from corral.errors import validation_error
from corral.models import Rule

EXEC_DEFAULT_TIMEOUT = 30
EXEC_MAX_TIMEOUT = 300
_NOT_POSITIVE = "must be a positive number of seconds"

ExecTimeout = Annotated[
    float | None,
    Rule(
        check=lambda seconds: None if seconds > 0 else _NOT_POSITIVE,
        message=_NOT_POSITIVE,
        description=f"seconds; default {EXEC_DEFAULT_TIMEOUT}, larger values are clamped to {EXEC_MAX_TIMEOUT}",
        schema={"exclusiveMinimum": 0, "default": EXEC_DEFAULT_TIMEOUT},
    ),
]
"""The `timeout` field of an exec body."""


def clamp_timeout(value: Any) -> int:
    """Whole seconds: 30 when absent, at most 300, at least 1; not a positive number is 422."""
    if value is None:
        return EXEC_DEFAULT_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise validation_error({"timeout": _NOT_POSITIVE})
    return max(1, int(min(value, EXEC_MAX_TIMEOUT)))
