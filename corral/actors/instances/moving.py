"""An instance's files to another node, and the instance made there from them (issue 30).

A drain moves a stopped sandbox, computer or database off its node
(`corral.actors.nodes.moves` says when). The files travel as the runtime's snapshot
archive (`export_snapshot`: owners, modes, extended attributes and overlay whiteouts
kept) through the blob store:
the old home packs a throwaway snapshot of the instance into it and has the new home
hold a copy; the new home unpacks it and makes the instance from it, stopped. The same
packing keeps a computer's snapshots on two nodes (`computers.snapshots.copies`).

`MovingInstance` is the part of an instance kind's actor that does it; a kind that
moves inherits it and says what it needs of a node (`move_demand`) and how it stops
and starts (`stop_for_move`, `start_after_move`). A kind whose instance is not the
runtime's packs and makes it its own way (`pack_for_move`, `unpack_moved`): a
database's server is its data directory, packed as a tar of the cleanly stopped
cluster (`corral.vm.postgres`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import trio

from corral.actors.actor import handles
from corral.actors.nodes import claims, moves, placement
from corral.actors.nodes.archives import export_to_blobs, forget_archive
from corral.actors.nodes.blobs import ClusterBlobs
from corral.actors.nodes.homes import left_this_node
from corral.errors import ApiError
from corral.storage import Blob, BlobStore, Transaction, sql_identifier
from corral.vm import InstanceNotFound, InstanceSpec, RuntimeDriver

from .actor import InstanceActor
from .messages import MoveAway

log = logging.getLogger("corral.instances.moving")

def move_snapshot_id(instance_id: str) -> str:
    """The throwaway snapshot a move packs and unpacks (the archive names it inside)."""
    return f"move-{instance_id}"


async def pack_files(blobs: BlobStore, driver: RuntimeDriver, data_dir: Path, instance_id: str) -> Blob:
    """The stopped instance's files as one archive in the blob store."""
    snapshot_id = move_snapshot_id(instance_id)
    await driver.delete_snapshot(snapshot_id)  # one a move cut short left
    await driver.snapshot(instance_id, snapshot_id)
    try:
        return await export_to_blobs(blobs, data_dir, lambda path: driver.export_snapshot(snapshot_id, path))
    finally:
        await driver.delete_snapshot(snapshot_id)


async def unpack_files(blobs: BlobStore, driver: RuntimeDriver, archive_sha256: str, spec: InstanceSpec) -> None:
    """Make the instance of `spec` here, stopped, with the archive's files (fetched from
    a node that holds it). An instance of that id left by an adoption cut short goes first."""
    archive = await blobs.verified_path(archive_sha256)
    snapshot_id = move_snapshot_id(spec.instance_id)
    await driver.import_snapshot(snapshot_id, archive)
    try:
        with contextlib.suppress(InstanceNotFound):
            await driver.destroy(spec.instance_id)
        await driver.create_from_snapshot(snapshot_id, spec)
        await driver.stop(spec.instance_id)
    finally:
        await driver.delete_snapshot(snapshot_id)


class MovingInstance(InstanceActor):
    """`MoveAway` (on the old home) and the adoption (on the new one) of an instance kind.

    A kind sets `movable_states` (states it moves in as it is: stopped) and
    `movable_when_running` (states it moves in only when running ones are asked for),
    and provides `move_demand`, `stop_for_move` and `start_after_move`; `prepare_move`
    and `after_move_away` are for what else it keeps on the node (a computer's snapshots).
    """

    movable_states: ClassVar[tuple[str, ...]] = ()
    movable_when_running: ClassVar[tuple[str, ...]] = ()
    movable_where: ClassVar[str] = ""
    """An SQL condition on the kind's table that a resource a drain moves also meets
    (empty: none); `check_movable` refuses the others when asked directly."""

    def move_demand(self) -> placement.Demand:
        """What the resource needs of the node it moves to (its size, template, region)."""
        raise NotImplementedError

    async def stop_for_move(self) -> bool:
        """Stop the resource (in one of `movable_when_running`) the kind's way (its
        events and meter), reason `move`; True when it is to start again on its new
        node (False: it arrives stopped)."""
        raise NotImplementedError

    async def start_after_move(self) -> None:
        """Start the moved resource the kind's way, on its new node."""
        raise NotImplementedError

    async def check_movable(self) -> None:
        """Raise (409) if this resource cannot move at all, whatever its state."""

    async def prepare_move(self) -> None:
        """Before the files go: make whatever else the resource keeps here reachable elsewhere."""

    async def after_move_away(self) -> None:
        """Once the resource lives elsewhere: remove what else of it this node kept."""

    async def pack_for_move(self) -> Blob:
        """The stopped instance's files as one archive in the blob store."""
        return await pack_files(self.services.blobs, await self.driver(), self.services.settings.data_dir, self.instance_id)

    async def unpack_moved(self, driver: RuntimeDriver, archive_sha256: str) -> None:
        """Make the instance here, stopped, from the archive `pack_for_move` made on the old home."""
        await self.template_here(driver)
        await unpack_files(self.services.blobs, driver, archive_sha256, self.spec(await self.boot_env()))

    async def after_move_here(self) -> None:
        """Once the instance is made here (stopped): what else the kind keeps on its node."""

    @handles(MoveAway)
    async def move_away(self, message: MoveAway) -> str:
        if self.is_removed():
            raise self.not_found()
        await self.check_movable()
        running = self.state in self.movable_when_running
        if self.state not in self.movable_states and not (running and message.running_too):
            raise ApiError(409, "INVALID_STATE", f"this {self.kind} cannot be moved from its current status ({self.state})")
        return await self.move_to_another_node(self.move_demand(), running=running)

    def on_shared_store(self) -> bool:
        """Whether other nodes may share this node's store (PostgreSQL), so that a
        resource can move to one of them."""
        return self.db.dialect == "postgresql"

    async def move_to_another_node(
        self, demand: placement.Demand, *, running: bool = False, fields: Mapping[str, Any] | None = None
    ) -> str:
        """Move the resource to the node placement picks for `demand` (never this one:
        503 when no other has room), writing `fields` into its row in the same
        transaction that makes that node its home; this actor retires. A running
        resource is stopped first and (as `stop_for_move` says) started there. Returns
        the new node's name."""
        here = self.services.settings.node_name
        placed = await placement.place(self.db, here, demand)
        restart = False
        try:
            if placed.node == here:
                raise placement.no_room(demand)  # placement offers this node only when it takes new work in that region
            if running:
                restart = await self.stop_for_move()
            try:
                archive = await self._hand_over(placed.node, started_after=restart, fields=fields or {})
            except BaseException:
                if restart:
                    with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await self.start_after_move()  # back as it was, here
                raise
        finally:
            with trio.CancelScope(shield=True):
                await claims.release(self.db, placed.claim_id)
        self.record = self.store.replaced(self.record, {**(fields or {}), "node": placed.node})
        left_this_node(self.id)
        driver = await self.driver()
        with contextlib.suppress(InstanceNotFound):
            await driver.destroy(self.instance_id)
        await self.services.agents.forget(self.instance_id)
        await self.after_move_away()
        log.warning("%s %s moved to node %s (archive %s)", self.kind, self.id, placed.node, archive)
        self.retire()
        return placed.node

    async def _hand_over(self, node: str, *, started_after: bool, fields: Mapping[str, Any]) -> str:
        """Pack the files, have `node` hold them, and make it the resource's home (and
        its row's `fields` what they say) with a move for it to adopt; returns the
        archive's digest."""
        await self.prepare_move()
        blobs = self.services.blobs
        with self.refused():
            blob = await self.pack_for_move()
        if not isinstance(blobs, ClusterBlobs) or not await blobs.copy_to(blob.sha256, node):
            raise ApiError(503, "SERVICE_UNAVAILABLE", f"node {node} could not take a copy of this {self.kind}'s files")
        here = self.services.settings.node_name
        move = moves.Move(self.kind, self.id, here, node, blob.sha256, started_after)
        table, id_column = sql_identifier(self.store.table), sql_identifier(self.store.id_column)

        assignments = "".join(f", {sql_identifier(name)} = ?" for name in fields)

        def write(tx: Transaction) -> None:
            changed = tx.execute(
                f"UPDATE {table} SET node = ?{assignments} WHERE {id_column} = ? AND node = ?",
                (node, *fields.values(), self.id, here),
            )
            if not changed:
                raise ApiError(409, "INVALID_STATE", f"this {self.kind} is no longer this node's")
            moves.insert(tx, move)

        await self.db.transaction(write)
        return blob.sha256

    async def adopt_move(self) -> bool:
        """A resource moved here: make its instance from the archive (stopped), start it
        if it ran before the move, and say so (`<kind>.moved`); True when it did."""
        move = await moves.find(self.db, self.kind, self.id)
        here = self.services.settings.node_name
        if move is None or getattr(self.record, "node", None) != here:
            return False
        driver = await self.driver()
        with self.refused():
            await self.unpack_moved(driver, move.archive_sha256)
        await moves.delete(self.db, self.kind, self.id)
        await forget_archive(self.services.blobs, move.archive_sha256)
        await self.after_move_here()
        await self.emit("moved", {**self.subject, "from_node": move.from_node, "node": here})
        log.warning("%s %s moved here from node %s", self.kind, self.id, move.from_node)
        if move.start_after:
            try:
                await self.start_after_move()
            except ApiError as exc:
                log.warning("%s %s moved here stays stopped: %s", self.kind, self.id, exc.message)
        return True
