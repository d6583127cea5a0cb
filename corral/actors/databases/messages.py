"""Messages a database actor handles (one per row of its state table, contract §13)."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.instances.messages import Boot, Booted, Get
from corral.actors.messages import Message

from .store import BackupRecord

__all__ = [
    "AddReplica",
    "Backup",
    "BackupDone",
    "Boot",
    "Booted",
    "Branch",
    "Destroy",
    "Get",
    "HandOver",
    "Move",
    "PrimaryMoved",
    "RecoverServer",
    "Resize",
    "Restart",
    "Restore",
    "Restored",
    "Rotate",
    "ServerExited",
    "Start",
    "Stop",
    "Suspend",
    "Upstream",
    "WaitForReplicas",
    "Wake",
]


@dataclass(frozen=True)
class Start(Message):
    """Start a stopped, suspended or failed database."""


@dataclass(frozen=True)
class Stop(Message):
    """Stop the server; the data stays."""


@dataclass(frozen=True)
class Restart(Message):
    """Stop, then start the running server."""


@dataclass(frozen=True)
class Wake(Message):
    """Start a suspended database (a running one answers unchanged)."""


@dataclass(frozen=True)
class Suspend(Message):
    """Idle for `auto_suspend_seconds` (the watcher's word): stop to `suspended`, unless a
    connection opened meanwhile."""


@dataclass(frozen=True)
class Upstream(Message):
    """The proxy has a client: the socket path, waking a suspended server first."""


@dataclass(frozen=True)
class Resize(Message):
    size: str


@dataclass(frozen=True)
class Move(Message):
    region: str


@dataclass(frozen=True)
class WaitForReplicas(Message):
    """The primary's commits wait until these replicas (on other nodes) have flushed them,
    each from when it first streamed from it (`replication.ReplicaWaits`); none: they
    wait for no replica. Answers the names it waits for now."""

    replica_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrimaryMoved(Message):
    """The replica's primary lives on `node` now (promoted from another replica): this
    replica, streaming from the old server, ends `error`."""

    node: str


@dataclass(frozen=True)
class Branch(Message):
    """Check that the database can be branched now; answers the server's id to copy."""


@dataclass(frozen=True)
class AddReplica(Message):
    """Check that the primary can take a replica now (it must run)."""


@dataclass(frozen=True)
class HandOver(Message):
    """A running replica gives its server to its primary, whose node is lost (issue 30):
    it stops it and ends `deleted`, leaving its files for the primary to take."""

    primary_id: str


@dataclass(frozen=True)
class Backup(Message):
    """Start an on-demand backup in a child task; answers its row (`running`)."""

    backup_id: str


@dataclass(frozen=True)
class BackupDone(Message):
    backup_id: str
    sha256: str | None
    size_bytes: int | None
    error: str | None = None


@dataclass(frozen=True)
class Restore(Message):
    """Make the database's contents the backup's, in a child task; answers the restore row."""

    restore_id: str
    backup: BackupRecord


@dataclass(frozen=True)
class Restored(Message):
    restore_id: str
    error: str | None = None


@dataclass(frozen=True)
class Rotate(Message):
    """A new password for the database's role; the old one stops working."""


@dataclass(frozen=True)
class ServerExited(Message):
    """The watcher found the server of a running database gone."""


@dataclass(frozen=True)
class RecoverServer(Message):
    """Start the crashed server again (after the backoff)."""


@dataclass(frozen=True)
class Destroy(Message):
    """Stop the server, destroy its data, free its port."""
