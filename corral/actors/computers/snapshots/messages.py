"""Messages about snapshots that a computer's actor handles."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.messages import Message


@dataclass(frozen=True)
class TakeSnapshot(Message):
    """Snapshot the computer's files (running, paused or stopped): answers the new
    `creating` record at once; a child task copies the files and reports `SnapshotTaken`."""

    name: str


@dataclass(frozen=True)
class SnapshotTaken(Message):
    """The copying child's outcome: the snapshot's size, or the error that stopped it."""

    snapshot_id: str
    size_bytes: int | None = None
    error: str | None = None
    archive_sha256: str | None = None


@dataclass(frozen=True)
class RestoreSnapshot(Message):
    """Make the computer's files the snapshot's: a running computer is stopped,
    restored and started again; a stopped one stays stopped. Answers the computer."""

    snapshot_id: str


@dataclass(frozen=True)
class DeleteSnapshot(Message):
    """Delete the snapshot's files; its row stays, `deleted` (a second delete is 409)."""

    snapshot_id: str
