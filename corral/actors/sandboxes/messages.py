"""Messages a sandbox actor handles: the instance kinds' common ones, and its own."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.instances.messages import Boot, Booted, Connect, Get, Touch
from corral.actors.messages import Message

__all__ = ["Boot", "Booted", "Connect", "Destroy", "Fork", "Get", "Start", "Stop", "Suspend", "Touch"]


@dataclass(frozen=True)
class Start(Message):
    """Start a stopped or suspended sandbox."""


@dataclass(frozen=True)
class Stop(Message):
    reason: str = "requested"


@dataclass(frozen=True)
class Suspend(Message):
    """Auto-stop: like Stop, but the sandbox ends `suspended`.

    From the idle watcher it carries what the watcher saw: the actor emits
    `sandbox.idle` and suspends only if `last_activity_at` is still the same.
    """

    idle_seconds: int | None = None
    last_activity_at: str | None = None


@dataclass(frozen=True)
class Destroy(Message):
    """Destroy the instance and everything in it; the row stays as `destroyed`."""


@dataclass(frozen=True)
class Fork(Message):
    """Copy this sandbox's files into the instance of the new sandbox `new_id`."""

    new_id: str

