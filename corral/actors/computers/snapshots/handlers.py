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
from dataclasses import replace
from typing import Any

from corral.actors.actor import handles
from corral.actors.instances import InstanceActor, failure_summary
from corral.errors import ApiError
from corral.ids import new_uuid
from corral.storage import utc_now_iso
from corral.vm import InstanceInfo, RuntimeDriver

from . import copies, store
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
        """The child: copy (and, on several nodes, keep a copy on another node), then
        report (the outcome is the snapshot's, never a crash). A snapshot whose archive
        could not be made is ready all the same, on this node only."""
        try:
            outcome = SnapshotTaken(snapshot_id, size_bytes=await self.snapshot_instance(snapshot_id))
        except Exception as exc:
            log.warning("snapshot %s of computer %s failed: %s", snapshot_id, self.id, exc)
            outcome = SnapshotTaken(snapshot_id, error=failure_summary(exc))
        else:
            try:
                archive = await copies.keep_elsewhere(self.services.blobs, await self.driver(), self.services.settings.data_dir, snapshot_id)
            except Exception as exc:
                log.warning("snapshot %s of computer %s is on this node only: %s", snapshot_id, self.id, exc)
            else:
                outcome = replace(outcome, archive_sha256=archive)
        with contextlib.suppress(ApiError):  # the computer was removed meanwhile
            await self.ref.tell(outcome)

    @handles(SnapshotTaken)
    async def snapshot_taken(self, message: SnapshotTaken) -> None:
        record = None if self.is_removed() else await store.find(self.db, self.id, message.snapshot_id)
        if record is None or record.status != "creating":  # deleted (or its computer) during the copy
            await self.delete_snapshot_files(message.snapshot_id)
            if message.archive_sha256:
                await copies.forget(self.services.blobs, message.archive_sha256)
            return
        subject = {**self.subject, "snapshot_id": record.id}
        if message.error is not None:
            await self.delete_snapshot_files(record.id)
            await store.update(self.db, record.id, status="failed", error=message.error)
            await self.emit("snapshot_failed", {**subject, "error": message.error})
            return
        await store.update(
            self.db, record.id, status="ready", size_bytes=message.size_bytes, ready_at=utc_now_iso(), archive_sha256=message.archive_sha256
        )
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
            await copies.here(self.services.blobs, await self.driver(), snapshot)  # taken on another node
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
            await copies.forget(self.services.blobs, record.archive_sha256)
        return {"id": record.id, "status": "deleted"}

    async def delete_all_snapshot_files(self) -> None:
        """Before the computer's row goes: the files of every snapshot it had, and their
        archives on every node (the rows go with the computer's)."""
        for record in await store.all_for_computer(self.db, self.id):
            await self.delete_snapshot_files(record.id)
            await copies.forget(self.services.blobs, record.archive_sha256)

    # -- on another node --------------------------------------------------------------------

    async def prepare_move(self) -> None:
        """A computer moving off its node: every ready snapshot kept there alone (taken
        before snapshots were kept on two nodes) gets its archive first."""
        for record in await store.list_for_computer(self.db, self.id):
            if record.status == "ready" and not record.archive_sha256:
                archive = await copies.keep_elsewhere(self.services.blobs, await self.driver(), self.services.settings.data_dir, record.id)
                await store.update(self.db, record.id, archive_sha256=archive)

    async def after_move_away(self) -> None:
        """The snapshots' files this node kept: their archives are what the new home uses."""
        for record in await store.all_for_computer(self.db, self.id):
            if record.archive_sha256 or record.status != "ready":
                await self.delete_snapshot_files(record.id)

    async def make_instance(
        self, driver: RuntimeDriver, env: dict[str, str], clone_source: str | None, snapshot_source: str | None
    ) -> InstanceInfo:
        """A computer made from a snapshot taken on another node fetches its files first."""
        if snapshot_source is not None and clone_source is None:
            record = await store.load(self.db, snapshot_source)
            if record is not None:
                await copies.here(self.services.blobs, driver, record)
        return await super().make_instance(driver, env, clone_source, snapshot_source)

    async def recover_here(self, lost_node: str) -> bool:
        """A computer whose node is lost comes back on the node that took it over, from
        its newest snapshot another node holds: running unless it was stopped (then
        stopped), its files as they were when the snapshot was taken. False when it has
        no such snapshot, or it could not be made: it reads `NODE_LOST` as others do."""
        if self.state not in ("running", "paused", "stopped"):
            return False
        snapshot = await store.newest_kept_elsewhere(self.db, self.id)
        if snapshot is None:
            return False
        was_stopped = self.state == "stopped"
        try:
            driver = await self.driver()
            await copies.here(self.services.blobs, driver, snapshot)
            info = await driver.create_from_snapshot(snapshot.id, self.spec(await self.boot_env()))
            if was_stopped:
                await driver.stop(self.instance_id)
            else:
                await self.apply_network_policy()
                await self.on_instance_up(info)
        except Exception as exc:
            log.warning("%s %s of lost node %s could not come back from snapshot %s: %s", self.kind, self.id, lost_node, snapshot.id, exc)
            with contextlib.suppress(Exception):
                await (await self.driver()).destroy(self.instance_id)
            return False
        data = {**self.subject, "snapshot_id": snapshot.id, "lost_node": lost_node, "node": self.services.settings.node_name}
        if was_stopped:
            await self.persist(state="stopped", error=None)
        else:
            self.info = info
            self.warm_agent(info)
            await self.persist(state="running", error=None, **self.running_fields())
            await self.on_running(booted=False)
        await self.emit("restored", data)
        log.warning("%s %s of lost node %s runs again here, from its snapshot %s", self.kind, self.id, lost_node, snapshot.id)
        return True
