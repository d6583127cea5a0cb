"""The one table from runtime and network errors to API answers.

`vm` and `net` raise plain exceptions named for what went wrong; which status and
code the API answers is decided here, once (httpcore's `map_exceptions` is the
model). A kind may word "not running" and "gone" its own way on top of this
(`corral.actors.instances.Refusals`); the HTTP layer maps any runtime error that
reaches it through the same table.

What a tenant reads about a failure (an API error, a resource's `error`, an event)
is `public_message`: API errors name no internal address, host path or host
interface (contract §18). A refusal the tenant caused (`status < 500`: a missing
file, a path outside the allowed ones) and a `PublicError` (a build step that
failed, a health check) keep their words, which speak of the tenant's own
instance. A network error says only what failed, an `OSError` its `strerror`
(never its file names). Any other failure keeps its first line with URLs, IPv4
addresses and absolute paths blanked (the guest agent's own words keep their
paths: they are the instance's). The full text, and the `detail` a runtime error
carries, go to the node's log (`public_text`).
"""

from __future__ import annotations

import logging
import re

from corral.errors import ApiError
from corral.net.errors import AddressExhausted, NetworkError
from corral.vm import errors as vm

log = logging.getLogger("corral.runtime")

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"`<>]+", re.IGNORECASE)
"""A URL (the agent's, a host service's): blanked whole."""
ADDRESS = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])")
"""An IPv4 address, with its port if it has one."""
PATH = re.compile(r"(?<![\w.~-])/[^\s'\"`,;:()\[\]{}<>|]+")
"""An absolute path."""
HIDDEN_ADDRESS, HIDDEN_PATH = "[address]", "[path]"

AGENT_WORDS: tuple[type[Exception], ...] = (vm.AgentError, *vm.AGENT_ERRORS.values())
"""Errors the guest agent answered: the paths they name are the instance's own."""

NETWORK_MESSAGES: dict[type[Exception], str] = {
    AddressExhausted: "this node has no free instance address",
    NetworkError: "the instance's network could not be set up",
}

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
    vm.DiskReserveReached: (503, "SERVICE_UNAVAILABLE"),
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


class PublicError(Exception):
    """An error whose message speaks only of the tenant's own world (its commands, its
    instance's paths and log lines): shown as it is."""


def _address(match: re.Match[str]) -> str:
    return match.group(0) if match.group(0).startswith("127.") else HIDDEN_ADDRESS


def redact(text: str, *, paths: bool = True) -> str:
    """`text` without URLs, IPv4 addresses but loopback (and absolute paths)."""
    text = ADDRESS.sub(_address, URL.sub(HIDDEN_ADDRESS, text))
    return PATH.sub(HIDDEN_PATH, text) if paths else text


def public_message(error: BaseException) -> str:
    """What a tenant may read about `error` (see the module's docstring)."""
    if isinstance(error, ApiError):
        return error.message
    if isinstance(error, PublicError):
        return str(error)
    if isinstance(error, NetworkError):
        return next(text for cls, text in NETWORK_MESSAGES.items() if isinstance(error, cls))
    if isinstance(error, OSError) and error.strerror:  # its strerror, never its file names
        return error.strerror
    text = str(error).strip()
    if isinstance(error, vm.RuntimeErrorBase) and answer_for(error)[0] < 500:
        return text
    first = text.splitlines()[0] if text else type(error).__name__
    return redact(first, paths=not isinstance(error, AGENT_WORDS))


def public_text(error: BaseException, context: str = "") -> str:
    """`public_message(error)`, having logged what it leaves out (the full text, the
    `detail`), under `context` (what failed: "sandbox <id> fork")."""
    public = public_message(error)
    full = str(error).strip()
    detail = getattr(error, "detail", "")
    if detail or full != public:
        where = f"{context}: " if context else ""
        log.warning("%s%s: %s%s", where, type(error).__name__, full, f" ({detail})" if detail else "")
    return public


def api_error_for(error: Exception) -> ApiError:
    """The API's answer; past 500 the message says it came from the runtime."""
    status, code = answer_for(error)
    public = public_text(error)
    return ApiError(status, code, public if status < 500 else f"runtime error: {public}")
