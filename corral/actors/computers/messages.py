"""Messages a computer actor handles (one per row of the specification's state table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.messages import Message
from corral.vm import InstanceInfo


@dataclass(frozen=True)
class Boot(Message):
    """Provision the instance of a new computer: create it (or copy `clone_source`'s
    files into it), install the selected apps, then report `Booted`."""

    clone_source: str | None = None
    """The source computer's instance id, for a clone."""


@dataclass(frozen=True)
class Booted(Message):
    """The provisioning child's outcome: the running instance, or the error that stopped it."""

    info: InstanceInfo | None
    error: str | None = None
    apps_error: str | None = None


@dataclass(frozen=True)
class Start(Message):
    """Start a stopped or paused computer (402 when credits cannot cover an hour)."""


@dataclass(frozen=True)
class Stop(Message):
    """Stop a running computer; its files are kept. `reason` goes into `computer.stopped`."""

    reason: str = "requested"


@dataclass(frozen=True)
class IdleStop(Message):
    """Auto-stop: emit `computer.idle`, then stop, if the computer is still as idle as
    the watcher saw it (`last_activity_at` unchanged)."""

    idle_seconds: int
    last_activity_at: str


@dataclass(frozen=True)
class Pause(Message):
    """Halt a running computer for the platform (credits exhausted): like stop, but the
    computer ends `paused`, which `start` resumes once credits allow."""

    reason: str = "credits_exhausted"


@dataclass(frozen=True)
class Restart(Message):
    """Stop then immediately start a running computer."""


@dataclass(frozen=True)
class Clone(Message):
    """Check that this computer may be cloned (it runs); answers its instance id."""


@dataclass(frozen=True)
class Resize(Message):
    size: str


@dataclass(frozen=True)
class Move(Message):
    region: str


@dataclass(frozen=True)
class Destroy(Message):
    """Destroy the instance and remove the record (and its env and metrics)."""


@dataclass(frozen=True)
class Connect(Message):
    """The running instance, for talking to its agent (exec, files, apps)."""


@dataclass(frozen=True)
class Update(Message):
    """Change fields that no state governs (`agent_session_id`, `auto_stop`)."""

    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Get(Message):
    """The computer's row as the actor holds it."""
