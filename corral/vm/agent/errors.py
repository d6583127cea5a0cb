"""Errors the guest agent answers with: an HTTP status plus the API's error code.

The control plane's client maps `code` back to the runtime exceptions in
`corral.vm.errors`, so the agent speaks the specification's codes directly.
"""

from __future__ import annotations


class AgentError(Exception):
    """A request the agent refuses; becomes `{"error": {"code", "message"}}`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def forbidden_path(path: str) -> AgentError:
    return AgentError(403, "FORBIDDEN_PATH", f"path is outside the allowed directories: {path}")


def file_not_found(path: str) -> AgentError:
    return AgentError(404, "FILE_NOT_FOUND", f"no such file or directory: {path}")


def invalid_path(path: str) -> AgentError:
    return AgentError(400, "INVALID_PATH", f"path must be absolute: {path}")


def missing_path() -> AgentError:
    return AgentError(400, "MISSING_PATH", "path is required")


def invalid_body(message: str = "request body is not valid JSON") -> AgentError:
    return AgentError(400, "INVALID_BODY", message)
