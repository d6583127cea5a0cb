"""API errors: one exception type carrying the specification's status and code.

Every layer raises `ApiError` (or a subclass of `CorralError` that the HTTP layer
maps) so that a handler never has to build an error envelope by hand.
"""

from __future__ import annotations

from typing import Any


class CorralError(Exception):
    """Base class of every error Corral raises on purpose."""


class ApiError(CorralError):
    """An error with an HTTP status and a specification error code.

    `details` is the per-field map of validation errors (contract §3).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers or {}

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r})"

    def body(self, request_id: str) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "request_id": request_id}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


def bad_request(code: str, message: str) -> ApiError:
    return ApiError(400, code, message)


def invalid_body(message: str = "request body is not valid JSON") -> ApiError:
    return ApiError(400, "INVALID_BODY", message)


def missing_param(name: str) -> ApiError:
    return ApiError(400, "MISSING_PARAM", f"{name} is required")


def invalid_id(noun: str = "id") -> ApiError:
    return ApiError(400, "INVALID_ID", f"invalid {noun}")


def validation_error(details: dict[str, str], message: str = "validation failed") -> ApiError:
    return ApiError(422, "VALIDATION_ERROR", message, details=details)


def unauthorized(message: str = "invalid or missing credentials", code: str = "invalid_token") -> ApiError:
    return ApiError(401, code, message)


def forbidden(message: str = "forbidden", code: str = "FORBIDDEN") -> ApiError:
    return ApiError(403, code, message)


def insufficient_scope(scope: str) -> ApiError:
    return ApiError(403, "insufficient_scope", f"this key lacks the {scope} scope")


def not_found(message: str = "not found", code: str = "NOT_FOUND") -> ApiError:
    return ApiError(404, code, message)


def conflict(code: str, message: str) -> ApiError:
    return ApiError(409, code, message)


def internal_error(message: str = "internal server error") -> ApiError:
    return ApiError(500, "INTERNAL_ERROR", message)
