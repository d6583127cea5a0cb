"""One exception family for everything the API (or the way to it) refuses.

Every error reply of Corral is the envelope `{error: {code, message, request_id,
details?}}` (contract §3); `CorralError` carries those fields and the HTTP status,
and its subclass says the status class, so callers catch `NotFound` or `Conflict`
without comparing numbers. A connection that fails is a `CorralConnectionError`
(status 0, code `CONNECTION_ERROR`): a script handles one family either way.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "BadRequest",
    "Conflict",
    "CorralConnectionError",
    "CorralError",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ResourceFailed",
    "ServerError",
    "Unauthorized",
    "Unprocessable",
    "WaitTimeout",
    "error_from_response",
]


class CorralError(Exception):
    """An error reply: `code` (e.g. `SANDBOX_NOT_RUNNING`), `message`, `request_id`, `status`."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int,
        request_id: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details or {}
        self.headers = headers or {}

    def one_line(self) -> str:
        """`CODE: message (request req_...)`, as the CLI prints it."""
        suffix = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.code}: {self.message}{suffix}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r}, request_id={self.request_id!r})"


class BadRequest(CorralError):
    """400: a missing parameter, a body that is not JSON, an invalid id."""


class Unauthorized(CorralError):
    """401: no, a wrong or an expired credential."""


class Forbidden(CorralError):
    """403: the credential may not do this (scope, role, IP)."""


class NotFound(CorralError):
    """404: no such resource, or another tenant's."""


class Conflict(CorralError):
    """409: the resource's state forbids it (`INVALID_STATE`, `SANDBOX_NOT_RUNNING`, ...)."""


class PayloadTooLarge(CorralError):
    """413: a file or body over the limit."""


class Unprocessable(CorralError):
    """422: `VALIDATION_ERROR` (per-field problems in `details`) and other refusals of a value."""


class RateLimited(CorralError):
    """429: too many requests; `retry_after` is the server's `Retry-After` in seconds."""

    @property
    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


class ServerError(CorralError):
    """5xx: the server failed; idempotent requests were already retried."""


class CorralConnectionError(CorralError):
    """The server could not be reached (refused, timed out, reset)."""

    def __init__(self, message: str) -> None:
        super().__init__("CONNECTION_ERROR", message, status=0)


_BY_STATUS: dict[int, type[CorralError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: RateLimited,
}


def error_from_response(response: httpx.Response) -> CorralError:
    """The exception for an error reply; a reply without the envelope still gets one."""
    status = response.status_code
    headers = {name.lower(): value for name, value in response.headers.items()}
    request_id = headers.get("x-request-id")
    code, message, details = f"HTTP_{status}", response.reason_phrase or "error", None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        request_id = str(error.get("request_id") or request_id or "") or None
        raw_details = error.get("details")
        details = raw_details if isinstance(raw_details, dict) else None
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else CorralError)
    return cls(code, message, status=status, request_id=request_id, details=details, headers=headers)


class WaitTimeout(CorralError):
    """`wait_for` gave up: the resource did not reach the wanted state in time."""

    def __init__(self, message: str) -> None:
        super().__init__("WAIT_TIMEOUT", message, status=0)


class ResourceFailed(CorralError):
    """`wait_for` saw the resource end in a failed state (`error`, `failed`, ...) instead."""

    def __init__(self, message: str, record: dict[str, object]) -> None:
        super().__init__("RESOURCE_FAILED", message, status=0)
        self.record = record
