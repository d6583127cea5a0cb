"""The one table from runtime and network errors to API answers.

`vm` and `net` raise plain exceptions named for what went wrong; which status and
code the API answers is decided here, once (httpcore's `map_exceptions` is the
model). A kind may word "not running" and "gone" its own way on top of this
(`corral.actors.instances.Refusals`); the HTTP layer maps any runtime error that
reaches it through the same table.
"""

from __future__ import annotations

from corral.errors import ApiError
from corral.net.errors import AddressExhausted, NetworkError
from corral.vm import errors as vm

RUNTIME_ERRORS: tuple[type[Exception], ...] = (vm.RuntimeErrorBase, NetworkError)
"""What a caller catches to catch every runtime and network error."""

ANSWERS: dict[type[Exception], tuple[int, str]] = {
    vm.TemplateNotFound: (400, "INVALID_TEMPLATE"),
    vm.TemplateBuildFailed: (500, "TEMPLATE_BUILD_FAILED"),
    vm.InstanceNotFound: (404, "NOT_FOUND"),
    vm.InstanceExists: (409, "INVALID_STATE"),
    vm.InvalidInstanceState: (409, "INVALID_STATE"),
    vm.InstanceNotRunning: (409, "SANDBOX_NOT_RUNNING"),
    vm.SnapshotNotFound: (404, "SNAPSHOT_NOT_FOUND"),
    vm.LaunchFailed: (500, "INTERNAL_ERROR"),
    vm.RuntimeUnavailable: (409, "SANDBOX_RUNTIME_UNAVAILABLE"),
    vm.AgentUnavailable: (502, "AGENT_UNAVAILABLE"),
    vm.PathForbidden: (403, "FORBIDDEN_PATH"),
    vm.InvalidPath: (400, "INVALID_PATH"),
    vm.MissingPath: (400, "MISSING_PATH"),
    vm.FileNotFound: (404, "FILE_NOT_FOUND"),
    vm.DestinationExists: (409, "DESTINATION_EXISTS"),
    vm.FileTooLarge: (413, "FILE_TOO_LARGE"),
    vm.MissingMode: (400, "MISSING_MODE"),
    vm.InvalidMode: (400, "INVALID_MODE"),
    vm.ProcessStartFailed: (500, "PROCESS_START_FAILED"),
    vm.ProcessNotFound: (404, "NOT_FOUND"),
    vm.RuntimeErrorBase: (500, "INTERNAL_ERROR"),
    AddressExhausted: (503, "SERVICE_UNAVAILABLE"),
    NetworkError: (500, "INTERNAL_ERROR"),
}


def answer_for(error: Exception) -> tuple[int, str]:
    """`(status, code)` for a runtime or network error (the nearest class in the table)."""
    if isinstance(error, vm.AgentError):
        return error.status, error.code
    for cls in type(error).__mro__:
        if cls in ANSWERS:
            return ANSWERS[cls]
    return 500, "INTERNAL_ERROR"


def api_error_for(error: Exception) -> ApiError:
    """The API's answer; past 500 the message says it came from the runtime."""
    status, code = answer_for(error)
    return ApiError(status, code, str(error) if status < 500 else f"runtime error: {error}")
