"""Sandboxes, computers and databases moving off a draining node (issue 30).

`POST /admin/nodes/{name}/drain` (any node) marks the node draining and records what
its drain moves (`nodes.moving`: `stopped`, or `all`). Only that node can read its
instances' files, so the moves are its own work (`move_forever`): one resource at a
time, its actor moves it (`InstanceActor.move_away`): placement picks a node with
room (not a draining one), the stopped instance's files are packed into the blob
store and handed to that node, and, in one transaction, the resource's `node`
becomes that node's and a row of `moves` says what to make there. The new home makes
the instance from the archive when the resource's actor is activated there
(`InstanceActor.adopt_move`), which every node does for the moves addressed to it
(`adopt_forever`), so a moved resource is ready before anyone asks for it; then the
row and the archive go.

A resource that cannot move now (no node has room, the copy failed) stays where it is
and is tried again on the next round. (A deployment service has no files to move: a
drain with `all` starts its version again elsewhere, `deployments.service_moves`.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from corral.actors.actor import Actor
from corral.errors import ApiError
from corral.storage import Database, Transaction, sql_identifier, utc_now_iso

from . import store
from .lost import Refs

log = logging.getLogger("corral.nodes.moves")

MOVES = ("none", "stopped", "all")
"""What a drain may move: nothing, stopped resources, or running ones too."""
ROUND_SECONDS = 2.0
MOVE_TIMEOUT = 1800.0
"""One resource's move (its files packed and copied): a large disk takes a while."""

MOVABLE = "SELECT id FROM {table} WHERE node = ? AND status IN ({states}){also} ORDER BY created_at"
"""The node's resources of a table in some states: a kind's actor says which states
move as they are (`movable_states`) and which only when running ones are asked for too
(`movable_when_running`; `corral.actors.instances.moving`), and what else a resource of the
kind meets to move (`movable_where`: a database with replicas does not)."""


@dataclass(frozen=True)
class Move:
    resource_type: str
    resource_id: str
    from_node: str
    to_node: str
    archive_sha256: str
    start_after: bool


def insert(tx: Transaction, move: Move) -> None:
    tx.execute(
        "INSERT INTO moves (resource_type, resource_id, from_node, to_node, archive_sha256, start_after, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (move.resource_type, move.resource_id, move.from_node, move.to_node, move.archive_sha256, int(move.start_after), utc_now_iso()),
    )


async def find(db: Database, resource_type: str, resource_id: str) -> Move | None:
    row = await db.fetch_one(
        "SELECT * FROM moves WHERE resource_type = ? AND resource_id = ?", (resource_type, resource_id)
    )
    if row is None:
        return None
    return Move(
        str(row["resource_type"]), str(row["resource_id"]), str(row["from_node"]), str(row["to_node"]),
        str(row["archive_sha256"]), bool(row["start_after"]),
    )


async def delete(db: Database, resource_type: str, resource_id: str) -> None:
    await db.execute("DELETE FROM moves WHERE resource_type = ? AND resource_id = ?", (resource_type, resource_id))


async def to_node(db: Database, node: str) -> list[tuple[str, str]]:
    """The moves addressed to `node`: (resource type, id), oldest first."""
    rows = await db.fetch_all("SELECT resource_type, resource_id FROM moves WHERE to_node = ? ORDER BY created_at", (node,))
    return [(str(row["resource_type"]), str(row["resource_id"])) for row in rows]


async def move_round(db: Database, refs: Refs, node: str, kinds: Mapping[str, type[Actor]], move_away: type) -> int:
    """If this node is draining with something to move: ask each movable resource's
    actor to move it (`move_away`, the message); returns how many moved."""
    record = await store.find(db, node)
    if record is None or record.state != store.DRAINING or record.moving not in ("stopped", "all"):
        return 0
    running_too = record.moving == "all"
    moved = 0
    for table, actor_class in kinds.items():
        states = tuple(getattr(actor_class, "movable_states", ()))
        if running_too:
            states += tuple(getattr(actor_class, "movable_when_running", ()))
        if not states:
            continue
        where = str(getattr(actor_class, "movable_where", ""))
        query = MOVABLE.format(
            table=sql_identifier(table), states=", ".join("?" for _ in states), also=f" AND ({where})" if where else ""
        )
        rows = await db.fetch_all(query, (node, *states))
        for row in rows:
            try:
                ref = await refs.get(actor_class, str(row["id"]))
                went = await ref.ask(move_away(running_too=running_too), timeout=MOVE_TIMEOUT)
            except ApiError as exc:
                log.info("%s %s did not move off draining node %s now: %s", table, row["id"], node, exc.message)
                continue
            log.info("%s %s moved off draining node %s to %s", table, row["id"], node, went)
            moved += 1
    return moved


async def move_forever(
    db: Database, refs: Refs, node: str, kinds: Mapping[str, type[Actor]], move_away: type,
    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`move_round` every `ROUND_SECONDS` (on every node: each moves only its own)."""
    task_status.started()
    while True:
        try:
            await move_round(db, refs, node, kinds, move_away)
        except Exception:
            log.warning("moving resources off this draining node failed", exc_info=True)
        await trio.sleep(ROUND_SECONDS)


async def adopt_forever(
    db: Database, refs: Refs, node: str, kinds: Mapping[str, type[Actor]], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Every `ROUND_SECONDS`, activate here the actor of each resource moved to this
    node: it makes its instance from the archive as it activates."""
    task_status.started()
    by_type = {actor_class.kind: actor_class for actor_class in kinds.values()}
    while True:
        try:
            for resource_type, resource_id in await to_node(db, node):
                actor_class = by_type.get(resource_type)
                if actor_class is None:
                    continue
                try:
                    await refs.get(actor_class, resource_id)
                except ApiError as exc:
                    log.warning("%s %s moved here could not be made here yet: %s", resource_type, resource_id, exc.message)
        except Exception:
            log.warning("adopting resources moved to this node failed", exc_info=True)
        await trio.sleep(ROUND_SECONDS)
