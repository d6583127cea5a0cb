"""Snapshot operations the HTTP layer calls (contract §10): take, list, get, restore, delete.

The caller has found the computer (its tenant's, else 404); every change goes through
the computer's actor, which owns the snapshot rows; reads use the store.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Annotated, Any

from corral.errors import ApiError
from corral.models import Rule, model

from .actor import ComputerActor
from .service import ASK_TIMEOUT
from .snapshots import (
    DeleteSnapshot,
    RestoreSnapshot,
    SnapshotRecord,
    SnapshotTaken,
    TakeSnapshot,
    snapshot_not_found,
)
from .snapshots import store as snapshot_store
from .store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

MAX_SNAPSHOT_NAME = 100
INTERRUPTED = "the copy was cut short by a restart of the control plane"


@model
class NewSnapshot:
    """A snapshot of the computer's files (not its memory)."""

    name: Annotated[
        str | None,
        Rule(
            max_length=MAX_SNAPSHOT_NAME,
            message=f"must be a non-empty string of at most {MAX_SNAPSHOT_NAME} characters",
            description="default `snapshot-<UTC date>-<time>`",
        ),
    ] = None


def default_name() -> str:
    return time.strftime("snapshot-%Y%m%d-%H%M%S", time.gmtime())


async def _ask(platform: ComputerServices, computer_id: str, message: Any) -> Any:
    ref = await platform.system.get(ComputerActor, computer_id)
    return await ref.ask(message, timeout=ASK_TIMEOUT)


async def take_snapshot(platform: ComputerServices, row: ComputerRecord, request: NewSnapshot) -> SnapshotRecord:
    """The new snapshot, `creating`: the copy goes on after the answer."""
    record: SnapshotRecord = await _ask(platform, row.id, TakeSnapshot(request.name or default_name()))
    return record


async def list_snapshots(platform: ComputerServices, row: ComputerRecord) -> list[SnapshotRecord]:
    return await snapshot_store.list_for_computer(platform.db, row.id)


async def get_snapshot(platform: ComputerServices, row: ComputerRecord, snapshot_id: str) -> SnapshotRecord:
    """The computer's snapshot (a deleted one too, with its status); 404 for any other."""
    record = await snapshot_store.find(platform.db, row.id, snapshot_id)
    if record is None:
        raise snapshot_not_found()
    return record


async def restore_snapshot(platform: ComputerServices, row: ComputerRecord, snapshot_id: str) -> ComputerRecord:
    record: ComputerRecord = await _ask(platform, row.id, RestoreSnapshot(snapshot_id))
    return record


async def delete_snapshot(platform: ComputerServices, row: ComputerRecord, snapshot_id: str) -> dict[str, str]:
    result: dict[str, str] = await _ask(platform, row.id, DeleteSnapshot(snapshot_id))
    return result


async def recover_snapshots(platform: ComputerServices) -> int:
    """At start-up: a copy a restart cut short failed (its partial files are gone already)."""
    interrupted = await snapshot_store.creating(platform.db)
    for record in interrupted:
        with contextlib.suppress(ApiError):  # its computer went meanwhile, and the row with it
            await _ask(platform, record.computer_id, SnapshotTaken(record.id, error=INTERRUPTED))
    return len(interrupted)
