"""Runtime exceptions, each carrying the API error code (and status) it becomes.

The actor layer maps them with `ApiError(exc.status, exc.code, str(exc))`; the guest
agent's error codes are mapped to the same classes by `corral.vm.client`.
"""

from __future__ import annotations

from corral.errors import CorralError


class RuntimeErrorBase(CorralError):
    """Base of every runtime error; `code` and `status` are the API's."""

    code = "INTERNAL_ERROR"
    status = 500


class TemplateNotFound(RuntimeErrorBase):
    code = "INVALID_TEMPLATE"
    status = 400


class TemplateBuildFailed(RuntimeErrorBase):
    code = "TEMPLATE_BUILD_FAILED"
    status = 500


class InstanceNotFound(RuntimeErrorBase):
    code = "NOT_FOUND"
    status = 404


class InstanceExists(RuntimeErrorBase):
    code = "INVALID_STATE"
    status = 409


class InvalidInstanceState(RuntimeErrorBase):
    """The operation needs another state (e.g. resize while running)."""

    code = "INVALID_STATE"
    status = 409


class InstanceNotRunning(RuntimeErrorBase):
    code = "SANDBOX_NOT_RUNNING"
    status = 409


class LaunchFailed(RuntimeErrorBase):
    """The instance could not be started (namespaces, mounts, agent)."""

    code = "INTERNAL_ERROR"
    status = 500


class RuntimeUnavailable(RuntimeErrorBase):
    """The instance has no address (yet): there is nothing to talk to."""

    code = "SANDBOX_RUNTIME_UNAVAILABLE"
    status = 409


class AgentUnavailable(RuntimeErrorBase):
    """The guest agent does not answer (connect error, timeout, broken stream)."""

    code = "AGENT_UNAVAILABLE"
    status = 502


class AgentError(RuntimeErrorBase):
    """An error the agent answered that has no more specific class."""

    def __init__(self, message: str, code: str = "INTERNAL_ERROR", status: int = 500) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class PathForbidden(RuntimeErrorBase):
    code = "FORBIDDEN_PATH"
    status = 403


class InvalidPath(RuntimeErrorBase):
    code = "INVALID_PATH"
    status = 400


class MissingPath(RuntimeErrorBase):
    code = "MISSING_PATH"
    status = 400


class FileNotFound(RuntimeErrorBase):
    code = "FILE_NOT_FOUND"
    status = 404


class DestinationExists(RuntimeErrorBase):
    code = "DESTINATION_EXISTS"
    status = 409


class FileTooLarge(RuntimeErrorBase):
    code = "FILE_TOO_LARGE"
    status = 413


class MissingMode(RuntimeErrorBase):
    code = "MISSING_MODE"
    status = 400


class InvalidMode(RuntimeErrorBase):
    code = "INVALID_MODE"
    status = 400


class ProcessStartFailed(RuntimeErrorBase):
    code = "PROCESS_START_FAILED"
    status = 500


class ProcessNotFound(RuntimeErrorBase):
    code = "NOT_FOUND"
    status = 404


#: Agent error codes -> the exception raised by the client.
AGENT_ERRORS: dict[str, type[RuntimeErrorBase]] = {
    "FORBIDDEN_PATH": PathForbidden,
    "INVALID_PATH": InvalidPath,
    "MISSING_PATH": MissingPath,
    "FILE_NOT_FOUND": FileNotFound,
    "DESTINATION_EXISTS": DestinationExists,
    "FILE_TOO_LARGE": FileTooLarge,
    "MISSING_MODE": MissingMode,
    "INVALID_MODE": InvalidMode,
    "PROCESS_START_FAILED": ProcessStartFailed,
    "NOT_FOUND": ProcessNotFound,
}
