"""`SnapshotHandlers`: what a computer's actor does with its snapshots.

| state | message | next | effects |
|---|---|---|---|
| running, paused, stopped | `TakeSnapshot` | (same) | row `creating`; child task: the runtime copies the files (a running instance frozen for the copy) |
| any | `SnapshotTaken` | (same) | row `ready` with `size_bytes` and `ready_at`, or `failed` with `error`; `computer.snapshot_ready` / `computer.snapshot_failed` |
| running, stopped | `RestoreSnapshot` | (same) | running: stop (`computer.stopped {reason: restore}`), restore, start (`computer.running`, `computer.started`); stopped: restore; `computer.restored` |
| any | `DeleteSnapshot` | (same) | row `deleted`, files removed; a second one 409 `already_deleted` |

The kind's transition table holds the rows for `TakeSnapshot` and `RestoreSnapshot`
(with their refusals); `SnapshotTaken` and `DeleteSnapshot` change no state. The
snapshots go with their computer: `delete_all_snapshot_files` before its row goes.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from corral.actors.actor import handles
from corral.actors.instances import InstanceActor, failure_summary
from corral.errors import ApiError
from corral.ids import new_uuid
from corral.storage import utc_now_iso

from . import store
from .errors import already_deleted, snapshot_not_found, snapshot_not_ready
from .messages import DeleteSnapshot, RestoreSnapshot, SnapshotTaken, TakeSnapshot
from .store import SnapshotRecord

log = logging.getLogger("corral.computers.snapshots")


class SnapshotHandlers(InstanceActor):
    """Snapshot handlers for an instance kind whose row id is `computer_id` of its snapshots.

    Hooks the kind provides: `emit_stopped(reason)` and `emit_running()`, the events of
    a running computer stopped and started around a restore.
    """

    async def emit_stopped(self, reason: str) -> None:
        """The kind's `stopped` event."""

    async def emit_running(self) -> None:
        """The kind's events for an instance that came up."""

    # -- take ---------------------------------------------------------------------------

    @handles(TakeSnapshot)
    async def take_snapshot(self, message: TakeSnapshot) -> SnapshotRecord:
        self.transition(message)
        assert self.tenant_id is not None
        record = SnapshotRecord(
            id=new_uuid(),
            computer_id=self.id,
            tenant_id=self.tenant_id,
            name=message.name,
            status="creating",
            size_bytes=None,
            created_at=utc_now_iso(),
            ready_at=None,
            error=None,
        )
        await self.db.transaction(lambda tx: store.insert(tx, record))
        self.spawn(self._copy_files, record.id, name=f"computer:{self.id}:snapshot:{record.id}")
        return record

    async def _copy_files(self, snapshot_id: str) -> None:
        """The child: copy, then report (the outcome is the snapshot's, never a crash)."""
        try:
            outcome = SnapshotTaken(snapshot_id, size_bytes=await self.snapshot_instance(snapshot_id))
        except Exception as exc:
            log.warning("snapshot %s of computer %s failed: %s", snapshot_id, self.id, exc)
            outcome = SnapshotTaken(snapshot_id, error=failure_summary(exc))
        with contextlib.suppress(ApiError):  # the computer was removed meanwhile
            await self.ref.tell(outcome)

    @handles(SnapshotTaken)
    async def snapshot_taken(self, message: SnapshotTaken) -> None:
        record = None if self.is_removed() else await store.find(self.db, self.id, message.snapshot_id)
        if record is None or record.status != "creating":  # deleted (or its computer) during the copy
            await self.delete_snapshot_files(message.snapshot_id)
            return
        subject = {**self.subject, "snapshot_id": record.id}
        if message.error is not None:
            await self.delete_snapshot_files(record.id)
            await store.update(self.db, record.id, status="failed", error=message.error)
            await self.emit("snapshot_failed", {**subject, "error": message.error})
            return
        await store.update(self.db, record.id, status="ready", size_bytes=message.size_bytes, ready_at=utc_now_iso())
        await self.emit("snapshot_ready", {**subject, "size_bytes": message.size_bytes})

    # -- restore ------------------------------------------------------------------------

    async def ready_snapshot(self, snapshot_id: str) -> SnapshotRecord:
        """This computer's snapshot, ready: 404 for another's or an unknown one, else 409."""
        record = await store.find(self.db, self.id, snapshot_id)
        if record is None:
            raise snapshot_not_found()
        if record.status != "ready":
            raise snapshot_not_ready()
        return record

    @handles(RestoreSnapshot)
    async def restore_snapshot(self, message: RestoreSnapshot) -> Any:
        if self.is_removed():
            raise self.not_found()
        snapshot = await self.ready_snapshot(message.snapshot_id)
        next_state = self.transition(message)
        was_running = self.state == "running"
        if was_running:
            await self.halt_instance()
            await self.emit_stopped("restore")
        try:
            await self.restore_instance(snapshot.id)
        finally:  # a failed restore leaves the files as they were: bring the computer back all the same
            if was_running:
                await self.start_instance()
        await self.persist(state=next_state, **({"last_activity_at": utc_now_iso()} if was_running else {}))
        if was_running:
            await self.emit_running()
        await self.emit("restored", {**self.subject, "snapshot_id": snapshot.id})
        return self.record

    # -- delete ---------------------------------------------------------------------------

    @handles(DeleteSnapshot)
    async def delete_snapshot(self, message: DeleteSnapshot) -> dict[str, str]:
        if self.is_removed():
            raise self.not_found()
        record = await store.find(self.db, self.id, message.snapshot_id)
        if record is None:
            raise snapshot_not_found()
        if record.status == "deleted":
            raise already_deleted()
        await store.update(self.db, record.id, status="deleted")
        if record.status != "creating":  # a copy under way is removed when it reports
            await self.delete_snapshot_files(record.id)
        return {"id": record.id, "status": "deleted"}

    async def delete_all_snapshot_files(self) -> None:
        """Before the computer's row goes: the files of every snapshot it had (the rows
        go with the computer's)."""
        for record in await store.all_for_computer(self.db, self.id):
            await self.delete_snapshot_files(record.id)
