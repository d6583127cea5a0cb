"""Messages every instance-owning actor handles; each kind adds its own beside them."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.messages import Message
from corral.vm import InstanceInfo


@dataclass(frozen=True)
class Boot(Message):
    """Make the instance of a new resource in a child task, then report `Booted`.

    With `clone_source` (another instance's id) the new instance starts with a copy
    of that instance's files; with `snapshot_source` (a runtime snapshot's id), with
    a copy of the snapshot's files.
    """

    clone_source: str | None = None
    snapshot_source: str | None = None


@dataclass(frozen=True)
class MoveAway(Message):
    """Move the resource to another node with room (a drain, issue 30): its files go
    through the blob store, and that node makes its instance from them. A stopped
    resource moves as it is; a running one only with `running_too` (stopped here,
    started there). Answers the node it went to."""

    running_too: bool = False


@dataclass(frozen=True)
class Booted(Message):
    """The boot child's outcome: the running instance, or the error that stopped it.

    `notice` is a problem that did not stop the resource from running (a computer's
    app that failed to install); it is kept in the error column for the user to see.
    """

    info: InstanceInfo | None
    error: str | None = None
    notice: str | None = None


@dataclass(frozen=True)
class Connect(Message):
    """The running instance, for talking to its agent (exec, files, processes)."""


@dataclass(frozen=True)
class Get(Message):
    """The resource's row as the actor holds it."""


@dataclass(frozen=True)
class Touch(Message):
    """Activity (exec, files, processes, preview traffic): auto-stop measures idleness
    from the last one. Told, never asked, so the caller does not wait on the mailbox."""
