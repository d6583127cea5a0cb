"""Messages a deployment actor and a deployment service actor handle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.instances.messages import Boot, Booted, Connect, Get
from corral.actors.messages import Message

__all__ = [
    "Boot", "Booted", "Connect", "Delete", "Get", "Halt", "Logs", "NewVersion", "Promote", "Restart", "StartService", "StopService",
    "Update", "VersionBuilding", "VersionDone", "VersionFailed",
]


@dataclass(frozen=True)
class Update(Message):
    """PATCH: any subset of name, auto_deploy, metadata, external_*."""

    fields: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Delete(Message):
    """Stop the services, unroute every URL, mark `deleted`; versions stay."""


@dataclass(frozen=True)
class NewVersion(Message):
    """A publish begins: a numbered version row in `created`."""

    values: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class VersionBuilding(Message):
    version_id: str


@dataclass(frozen=True)
class VersionDone(Message):
    """The artifact is stored (and a service is healthy): the version is `ready`;
    promoted when `promote`."""

    version_id: str
    values: dict[str, Any] = field(hash=False)
    promote: bool = False


@dataclass(frozen=True)
class VersionFailed(Message):
    version_id: str
    code: str
    message: str
    values: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Promote(Message):
    """Point production at a ready or archived version (`rollback`: say so in the webhook)."""

    version_id: str
    rollback: bool = False
    environment: str = "production"


@dataclass(frozen=True)
class Restart(Message):
    """A deployment service's process exited: run it again (the supervisor's backoff)."""

    process_id: str | None = None


@dataclass(frozen=True)
class StopService(Message):
    """Destroy a deployment service's instance (its deployment was deleted)."""


@dataclass(frozen=True)
class Logs(Message):
    """The last `tail` output lines of a deployment service's process."""

    tail: int = 200


@dataclass(frozen=True)
class Halt(Message):
    """Stop a running deployment service's instance (credits ran out); files stay."""

    reason: str = "credits_exhausted"


@dataclass(frozen=True)
class StartService(Message):
    """Start a stopped deployment service again (its version is promoted again)."""
