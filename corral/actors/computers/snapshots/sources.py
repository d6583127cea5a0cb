"""A snapshot as the source of a new computer (`POST /computers` with `snapshot_id`)."""

from __future__ import annotations

from corral.errors import validation_error
from corral.storage import Database

from .. import store as computer_store
from . import store
from .errors import snapshot_not_found, snapshot_not_ready
from .store import SnapshotRecord


async def source_snapshot(
    db: Database, tenant_id: str, snapshot_id: str, template_type: str, *, key_workspace_id: str | None = None
) -> SnapshotRecord:
    """The tenant's ready snapshot to create a computer of `template_type` from.

    404 for an unknown, deleted or another tenant's snapshot (or, for a key restricted
    to a workspace, a snapshot of a computer elsewhere); 409 `SNAPSHOT_NOT_READY`
    while it is `creating` or after it `failed`; 422 when the new computer's
    `template_type` is not that of the snapshot's computer (its files belong over
    that template's root file system).
    """
    record = await store.find_for_tenant(db, tenant_id, snapshot_id)
    computer = await computer_store.load(db, record.computer_id) if record is not None else None
    if record is None or computer is None or record.status == "deleted":
        raise snapshot_not_found()
    if key_workspace_id is not None and computer.workspace_id != key_workspace_id:
        raise snapshot_not_found()
    if record.status != "ready":
        raise snapshot_not_ready()
    if computer.template_type != template_type:
        raise validation_error({"template_type": f"must be the snapshot's template_type ({computer.template_type})"})
    return record


async def still_ready(db: Database, snapshot_id: str) -> bool:
    """Whether a computer being created from this snapshot can still copy its files."""
    record = await store.load(db, snapshot_id)
    return record is not None and record.status == "ready"


