"""The `computer_snapshots` table: every query about snapshot rows, returning `SnapshotRecord`s.

A snapshot belongs to its computer: the computer's actor is the only writer of its
snapshots' rows (`insert`, `update`; they go with the computer's own row in
`corral.actors.computers.store.delete`); reads are for anyone in the package.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction

#: The states of a snapshot: `creating` until the copy is made, then `ready` or
#: `failed`; `deleted` rows stay (a second delete is 409) until their computer goes.
STATUSES = ("creating", "ready", "failed", "deleted")


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """One snapshot row."""

    id: str
    computer_id: str
    tenant_id: str
    name: str
    status: str
    size_bytes: int | None
    created_at: str
    ready_at: str | None
    error: str | None
    archive_sha256: str | None = None
    """The snapshot packed in the blob store, which another node holds too (`copies`)."""


SNAPSHOTS = RowStore("computer_snapshots", SnapshotRecord)

NEWEST_FIRST = "created_at DESC, id DESC"


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, snapshot_id: str) -> SnapshotRecord | None:
    return await SNAPSHOTS.load(db, snapshot_id)


async def find(db: Database, computer_id: str, snapshot_id: str) -> SnapshotRecord | None:
    """The computer's snapshot of that id (deleted ones too), or None."""
    found = await SNAPSHOTS.where(db, [("id", snapshot_id), ("computer_id", computer_id)])
    return found[0] if found else None


async def find_for_tenant(db: Database, tenant_id: str, snapshot_id: str) -> SnapshotRecord | None:
    """The tenant's snapshot of that id, whichever computer it is of, or None."""
    found = await SNAPSHOTS.where(db, [("id", snapshot_id), ("tenant_id", tenant_id)])
    return found[0] if found else None


async def list_for_computer(db: Database, computer_id: str) -> list[SnapshotRecord]:
    """The computer's snapshots, newest first, deleted ones left out."""
    return await SNAPSHOTS.where(db, [("computer_id", computer_id)], also="status <> 'deleted'", order_by=NEWEST_FIRST)


async def all_for_computer(db: Database, computer_id: str) -> list[SnapshotRecord]:
    """Every row of the computer, deleted ones too (whose files may need removing)."""
    return await SNAPSHOTS.where(db, [("computer_id", computer_id)], order_by=NEWEST_FIRST)


async def newest_kept_elsewhere(db: Database, computer_id: str) -> SnapshotRecord | None:
    """The computer's newest ready snapshot that another node holds a copy of."""
    found = await SNAPSHOTS.where(
        db, [("computer_id", computer_id), ("status", "ready")], also="archive_sha256 IS NOT NULL", order_by=NEWEST_FIRST
    )
    return found[0] if found else None


async def creating(db: Database) -> list[SnapshotRecord]:
    """Snapshots whose copy is under way (or was, when a restart cut it short)."""
    return await SNAPSHOTS.where(db, [("status", "creating")], order_by="created_at, id")


# -- writes (the computer actor's) ------------------------------------------------------------


def insert(tx: Transaction, record: SnapshotRecord) -> None:
    SNAPSHOTS.insert(tx, record)


async def update(db: Database, snapshot_id: str, **values: object) -> bool:
    return await SNAPSHOTS.update(db, snapshot_id, dict(values))

