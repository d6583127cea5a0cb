"""Messages a sandbox actor handles."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.messages import Message
from corral.vm import InstanceInfo


@dataclass(frozen=True)
class Boot(Message):
    """Create the instance of a new sandbox (sent once, right after the row is written)."""


@dataclass(frozen=True)
class Booted(Message):
    """The boot child's outcome: the running instance, or the error that stopped it."""

    info: InstanceInfo | None
    error: str | None = None


@dataclass(frozen=True)
class Start(Message):
    """Start a stopped or suspended sandbox."""


@dataclass(frozen=True)
class Stop(Message):
    reason: str = "requested"


@dataclass(frozen=True)
class Suspend(Message):
    """Auto-stop: like Stop, but the sandbox ends `suspended`."""


@dataclass(frozen=True)
class Destroy(Message):
    """Destroy the instance and everything in it; the row stays as `destroyed`."""


@dataclass(frozen=True)
class Connect(Message):
    """The running instance, for talking to its agent (exec, files, processes)."""


@dataclass(frozen=True)
class Fork(Message):
    """Copy this sandbox's files into the instance of the new sandbox `new_id`."""

    new_id: str


@dataclass(frozen=True)
class Get(Message):
    """The sandbox's row as the actor holds it."""
