"""Messages a computer actor handles (one per row of the specification's state table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.instances.messages import Boot, Booted, Connect, Get
from corral.actors.messages import Message

__all__ = [
    "Boot",
    "Booted",
    "Clone",
    "Connect",
    "Destroy",
    "Get",
    "IdleStop",
    "Move",
    "Pause",
    "Resize",
    "Restart",
    "Start",
    "Stop",
    "Update",
]


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
    """Freeze a running computer (contract §10): its processes and memory stay, it uses
    no CPU and accrues no compute credits; `start` thaws it. Billing pauses with the
    reason `credits_exhausted`, which `computer.stopped` carries."""

    reason: str = "paused"


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
class Update(Message):
    """Change fields that no state governs (`agent_session_id`, `auto_stop`)."""

    fields: dict[str, Any] = field(default_factory=dict)


