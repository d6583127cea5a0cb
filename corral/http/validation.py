"""Small field validators that collect per-field messages into one VALIDATION_ERROR."""

from __future__ import annotations

from typing import Any

from corral.errors import ApiError, missing_param, validation_error


class Fields:
    """Read fields from a JSON body, collecting every problem before raising once."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.errors: dict[str, str] = {}

    def string(self, name: str, *, required: bool = False, max_length: int = 255, allow_empty: bool = False) -> str | None:
        value = self.body.get(name)
        if value is None:
            if required:
                self.errors[name] = "is required"
            return None
        if not isinstance(value, str):
            self.errors[name] = "must be a string"
            return None
        value = value.strip()
        if not value and not allow_empty:
            self.errors[name] = "must not be empty"
            return None
        if len(value) > max_length:
            self.errors[name] = f"must be at most {max_length} characters"
            return None
        return value

    def choice(self, name: str, choices: tuple[str, ...], *, required: bool = False, default: str | None = None) -> str | None:
        value = self.body.get(name, default)
        if value is None:
            if required:
                self.errors[name] = "is required"
            return None
        if value not in choices:
            self.errors[name] = f"must be one of {', '.join(choices)}"
            return None
        return str(value)

    def integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        value = self.body.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors[name] = "must be an integer"
            return None
        if minimum is not None and value < minimum:
            self.errors[name] = f"must be at least {minimum}"
        elif maximum is not None and value > maximum:
            self.errors[name] = f"must be at most {maximum}"
        return value

    def check(self) -> None:
        if self.errors:
            raise validation_error(dict(self.errors))


def require_present(body: dict[str, Any], *names: str) -> None:
    """400 MISSING_PARAM for the first absent field (the specification's `x is required`)."""
    for name in names:
        value = body.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise missing_param(name)


def ensure(condition: bool, status: int, code: str, message: str) -> None:
    if not condition:
        raise ApiError(status, code, message)
