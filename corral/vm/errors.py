"""Runtime exceptions: plain, and named for what went wrong in the runtime.

They carry no API codes: which answer each becomes is the actor layer's one table
(`corral.actors.runtime_errors`). The guest agent's own error codes (its protocol)
are mapped to these classes by `corral.vm.client`; an agent error with no class of
its own is an `AgentError` that keeps the agent's code and status.

A message may reach a tenant (an API error, a resource's `error`, an event): it says
what happened without the node's inside (no instance address, host path or
interface name); what the operator needs goes in `detail`, which is only logged.
The actor layer redacts what still slips through (contract §18).
"""

from __future__ import annotations


class RuntimeErrorBase(Exception):
    """Base of every runtime error; `detail` is for the node's log only."""

    def __init__(self, *args: object, detail: str = "") -> None:
        super().__init__(*args)
        self.detail = detail


class TemplateNotFound(RuntimeErrorBase):
    """No such template (recipe) exists."""


class TemplateBuildFailed(RuntimeErrorBase):
    """Building a template's root filesystem failed."""


class InstanceNotFound(RuntimeErrorBase):
    """The runtime has no instance of that id."""


class InstanceExists(RuntimeErrorBase):
    """An instance of that id exists already."""


class InvalidInstanceState(RuntimeErrorBase):
    """The operation needs another state (e.g. resize while running)."""


class InstanceNotRunning(RuntimeErrorBase):
    """The operation needs a running instance."""


class SnapshotNotFound(RuntimeErrorBase):
    """The runtime keeps no snapshot of that id."""


class LaunchFailed(RuntimeErrorBase):
    """The instance could not be started (namespaces, mounts, agent)."""


class RuntimeUnavailable(RuntimeErrorBase):
    """The instance has no address (yet): there is nothing to talk to."""


class AgentUnavailable(RuntimeErrorBase):
    """The guest agent does not answer (connect error, timeout, broken stream)."""


class AgentError(RuntimeErrorBase):
    """An error the agent answered that has no more specific class: its code and status
    are the agent's own words (the agent speaks the API's codes for what it checks)."""

    def __init__(self, message: str, code: str = "INTERNAL_ERROR", status: int = 500, *, detail: str = "") -> None:
        super().__init__(message, detail=detail)
        self.code = code
        self.status = status


class PathForbidden(RuntimeErrorBase):
    """The path is outside the allowed directories."""


class InvalidPath(RuntimeErrorBase):
    """The path is malformed (`..`, `~`, not absolute)."""


class MissingPath(RuntimeErrorBase):
    """No path was given."""


class FileNotFound(RuntimeErrorBase):
    """No file or directory at the path."""


class DestinationExists(RuntimeErrorBase):
    """A rename or copy would overwrite something."""


class FileTooLarge(RuntimeErrorBase):
    """The file is over the agent's size limit."""


class MissingMode(RuntimeErrorBase):
    """chmod without a mode."""


class InvalidMode(RuntimeErrorBase):
    """A mode that is not octal permission bits."""


class ProcessStartFailed(RuntimeErrorBase):
    """The command could not be started (working directory, exec)."""


class ProcessNotFound(RuntimeErrorBase):
    """The agent knows no process of that id."""


class DiskReserveReached(RuntimeErrorBase):
    """The node's file system has less free space than its reserve: no new instance disk."""


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
