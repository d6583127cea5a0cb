"""A lost node (issue 30, contract §20): its resources read `error` with
`error: {code: "NODE_LOST", message}`, on a surviving node, until deleted; and when
the node comes back it destroys the instances that are no longer its own.

**Taking over.** A resource's `node` column is its lease: only that node runs its
actor (`InstanceActor.refuse_if_homed_elsewhere`). When the named node is lost (its
heartbeat older than `LOST_AFTER_SECONDS`; or, if it stopped cleanly, gone longer than
`RESTART_GRACE_SECONDS`: a clean stop is how a node is restarted or upgraded, and its
instances outlive it to be re-adopted), the actor may be activated on another node,
and its activation takes the resource over (`take_over`): one
compare-and-set moves `node` from the lost node to this one, so of two nodes that try
at once exactly one wins (the other answers `503`, "lives on node X"), and the lost
node can tell on its return that the resource is no longer its own. The winner's
actor then writes the status and the error as it writes every status (its `persist`,
with the kind's hooks: a meter stops), so "an actor is the only writer of its
resource's rows" holds: the compare-and-set is the actor's own write, made before it
does anything else. A draining node takes over only what it holds or has a copy of to
come back from (a database's replica): the rest it leaves, with a `503` that says
which node takes new work, to that node, where the sweep below takes it (a computer
brought back from its snapshot is made on a node that stays, not on one on its way out).

Requests alone would take a resource over only when someone asks for it, and lists
(read from the store) would show it `running` meanwhile. So one surviving node, the
holder of the cluster lease `LEASE` (`leases.py`), sweeps every `SWEEP_SECONDS`: it
activates the actor of every live resource whose home is lost, which takes it over.
From a `kill -9` that is at most the 6 s a heartbeat takes to go stale, plus a lease
round if the lost node held the lease (a lease of a node seen lost is free), plus a
sweep: measured 5.0 to 6.6 s.

**The error.** The `error` column stays the text a tenant may read; a lost node's is
`NODE_LOST: <message>`, and the API shows it as `{code: "NODE_LOST", message}`
(`public_error`), the other errors as the strings they were.

**Coming back.** Each take-over also writes the instance's id in `lost_instances` under
the lost node's name. A node that starts, and every `ORPHAN_CHECK_SECONDS` after (it
may have been cut off rather than dead, and come back without a restart), destroys
each instance it runs that is listed there (its record may have been deleted since),
or (at start) whose record names another node that runs, and logs each one. Instances
whose records still name it are re-adopted as on any restart. A node whose runtime
holds the instance itself (the lost node was this one under an older name) takes the
resource over as it is, without an error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import trio

from corral.errors import ApiError
from corral.storage import Database, Row, Transaction, sql_identifier, to_iso, utc_now, utc_now_iso
from corral.vm import InstanceNotFound, RuntimeDriver

from .homes import node_is_live
from .store import HOSTED, LOST_AFTER_SECONDS, active_instead, lost_before

log = logging.getLogger("corral.nodes.lost")

CODE = "NODE_LOST"
PREFIX = f"{CODE}: "
LEASE = "lost-nodes"
SWEEP_SECONDS = 1.0
ORPHAN_CHECK_SECONDS = 5.0


RESTART_GRACE_SECONDS = 60.0
"""How long the resources of a node that stopped cleanly wait for it to come back."""


def lost_text(kind: str, node: str, when: str) -> str:
    """The error column of a resource taken over from lost node `node`; `when` says
    since when (`stopped answering at T`)."""
    noun = kind.replace("_", " ")
    if kind == "template_build":  # a build is not deleted: it ends, and its template is built again
        advice = f"{NO_WAY_BACK[kind][0].upper()}{NO_WAY_BACK[kind][1:]}"
    else:
        advice = f"Delete the {noun}: {NO_WAY_BACK.get(kind, 'it cannot be restored on another node')}"
    return f"{PREFIX}node {node} {when}; this {noun}'s instance is gone with it (destroyed if the node comes back). {advice}"


NO_WAY_BACK = {
    "computer": "it had no snapshot that another node holds, to come back from",
    "database": "it had no running replica on another node to promote",
    "template_build": "build the template again",
}
"""Why a resource of a kind that can come back on another node did not."""


def _since(seconds: float) -> str:
    return to_iso(utc_now() - timedelta(seconds=seconds))


def _may_take_over(row: Row | None) -> str | None:
    """Whether a resource homed on this `nodes` row may be taken over now, as the text
    that says since when its node is gone (None: not yet). A node that crashed (or was
    cut off) is, once its heartbeat is older than `LOST_AFTER_SECONDS`; one that stopped
    cleanly (its boot id cleared) is expected back, as instances outlive a restart of
    the control plane (an upgrade), and is after `RESTART_GRACE_SECONDS`; a node with no
    row at all is."""
    if row is None:
        return "is not in the cluster"
    if row["boot_id"]:
        return None if row["heartbeat_at"] >= _since(LOST_AFTER_SECONDS) else f"stopped answering at {row['heartbeat_at']}"
    if row["updated_at"] >= _since(RESTART_GRACE_SECONDS):
        return None
    return f"stopped at {row['updated_at']} and did not come back within {RESTART_GRACE_SECONDS:.0f} s"


async def may_take_over_from(db: Database, node: str) -> bool:
    """Whether the resources of `node` (not live) may be taken over now."""
    row = await db.fetch_one("SELECT boot_id, heartbeat_at, updated_at FROM nodes WHERE name = ?", (node,))
    return _may_take_over(row) is not None


def public_error(text: str) -> str | dict[str, str]:
    """The `error` field of a resource as the API shows it: `{code: "NODE_LOST", message}`
    for a lost node's (contract §20), else the stored text, as before."""
    if text.startswith(PREFIX):
        return {"code": CODE, "message": text[len(PREFIX):]}
    return text


@dataclass(frozen=True)
class TakenOver:
    error: str | None
    """The error column to write (`lost_text`); None: the instance is on the node that
    took the resource over (it was renamed), which adopts it as it is."""


def _take_over(
    tx: Transaction, table: str, id_column: str, resource_id: str, lost_node: str, node: str, kind: str,
    instance_id: str, held_here: bool, copy_here: bool, recovering: dict[str, str] | None,
) -> TakenOver | None:
    when = _may_take_over(tx.fetch_one("SELECT boot_id, heartbeat_at, updated_at FROM nodes WHERE name = ?", (lost_node,)))
    if when is None:  # back, or not gone long enough
        return None
    instead = None if held_here or copy_here else active_instead(tx, node, lost_before())
    if instead is not None:
        noun = kind.replace("_", " ")
        raise ApiError(
            503, "SERVICE_UNAVAILABLE",
            f"this {noun}'s node {lost_node} {when}, and this node ({node}) is draining: node {instead}"
            f" takes the {noun} over within seconds; send the request again",
        )
    written = {"node": node, **(recovering or {})}
    moved = tx.execute(
        f"UPDATE {sql_identifier(table)} SET {', '.join(f'{sql_identifier(column)} = ?' for column in written)}"
        f" WHERE {sql_identifier(id_column)} = ? AND node = ?",
        (*written.values(), resource_id, lost_node),
    )
    if not moved:
        return None
    if held_here:
        return TakenOver(None)
    tx.execute(
        "INSERT INTO lost_instances (node, instance_id, kind, resource_id, lost_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (node, instance_id) DO NOTHING",
        (lost_node, instance_id, kind, resource_id, utc_now_iso()),
    )
    return TakenOver(lost_text(kind, lost_node, when))


async def take_over(
    db: Database, *, table: str, id_column: str, resource_id: str, lost_node: str, node: str, kind: str,
    instance_id: str, held_here: bool, copy_here: bool = False, recovering: dict[str, str] | None = None,
) -> TakenOver | None:
    """Move a resource's home from `lost_node` to `node` (compare-and-set, only while
    `lost_node` may be taken over from), and list its instance for the lost node to
    destroy on its return (unless `held_here`: this node's runtime has the instance);
    None when another node moved it first, or the lost node is back or expected back.
    A draining node takes over only what it holds or has a copy of to come back from
    (`copy_here`: a database's replica); else, while another node takes new work, it
    refuses (`503`) and leaves the resource to that node (the sweep's holder).
    `recovering` (columns and values), given when the resource comes back from its copy
    here, is written with the move, so that no reader sees it on this node in the state
    it had on the lost one (a database reads `restarting` while its replica is promoted,
    not `running` where nothing answers yet).
    The caller is the resource's actor (`InstanceActor.take_over_from`)."""
    return await db.transaction(
        lambda tx: _take_over(
            tx, table, id_column, resource_id, lost_node, node, kind, instance_id, held_here, copy_here, recovering
        )
    )


class Refs(Protocol):
    """What the sweep needs of the actor system."""

    async def get(self, actor_class: type, actor_id: str) -> Any: ...


async def lost_nodes(db: Database, node: str) -> list[str]:
    """The other nodes whose resources may be taken over now (`_may_take_over`)."""
    rows = await db.fetch_all("SELECT name, boot_id, heartbeat_at, updated_at FROM nodes WHERE name <> ?", (node,))
    return [str(row["name"]) for row in rows if _may_take_over(row) is not None]


RUN_TARGETS = {"sandbox": "sandboxes", "computer": "computers"}
"""Agent runs' target kinds, and their tables."""


async def sweep(
    db: Database, refs: Refs, node: str, kinds: Mapping[str, type], runs: type | None = None,
    deferred: Mapping[str, str] | None = None,
) -> int:
    """Activate here the actor of every live resource homed on a lost node, which takes
    it over, then of every running agent run whose target was taken over (`runs`);
    returns how many resources were taken (or found taken by another node meanwhile).
    `deferred`: per table, a condition (`{lost}` standing for the lost nodes' names)
    that a resource left to another node's own take-over fails (a database with a
    running replica on a live node: that node promotes it)."""
    if runs is not None:
        await _end_runs_of_lost_targets(db, refs, runs)
    lost = await lost_nodes(db, node)
    if not lost:
        return 0
    marks = ", ".join("?" for _ in lost)
    taken = 0
    for table, actor_class in kinds.items():
        extra = (deferred or {}).get(table)
        condition = f" AND {extra.format(lost=marks)}" if extra else ""
        rows = await db.fetch_all(
            f"SELECT id FROM {sql_identifier(table)} WHERE node IN ({marks}) AND {HOSTED[table]}{condition}",
            tuple(lost) * (2 if extra else 1),
        )
        for row in rows:
            try:
                await refs.get(actor_class, str(row["id"]))
            except ApiError as exc:
                log.info("%s %s of a lost node was not taken over here: %s", table, row["id"], exc.message)
                continue
            taken += 1
    if taken:
        log.warning("took over %d resource(s) of lost node(s) %s", taken, ", ".join(lost))
        if runs is not None:
            await _end_runs_of_lost_targets(db, refs, runs)
    return taken


async def _end_runs_of_lost_targets(db: Database, refs: Refs, runs: type) -> None:
    """A running agent run whose target reads `NODE_LOST` was followed by the lost node
    (a run's follower reaches its target through the target's home, so one on any live
    node other than the lost one has ended already): its actor, activated here, finds
    the target gone and ends the run `failed`, instead of `running` for ever."""
    for kind, table in RUN_TARGETS.items():
        rows = await db.fetch_all(
            f"SELECT agent_runs.id FROM agent_runs JOIN {table} ON {table}.id = agent_runs.target_id"
            f" WHERE agent_runs.status = 'running' AND agent_runs.target_kind = ? AND {table}.status = 'error'"
            f" AND {table}.error LIKE ?",
            (kind, f"{PREFIX}%"),
        )
        for row in rows:
            try:
                await refs.get(runs, str(row["id"]))
            except ApiError as exc:
                log.info("agent run %s of a lost node's %s was not taken up here: %s", row["id"], kind, exc.message)


# -- a returning node ------------------------------------------------------------------


OWNERS = (("sandboxes", "id"), ("computers", "instance_id"), ("deployment_services", "id"), ("sandbox_template_builds", "id"))
"""Where the runtime's instances have their records, by the column that names them."""


async def _owner(db: Database, instance_id: str) -> str | None:
    """The node a record of the instance names (None: no record, or no node)."""
    for table, column in OWNERS:
        row = await db.fetch_one(f"SELECT node FROM {table} WHERE {column} = ?", (instance_id,))
        if row is not None:
            return None if row["node"] is None else str(row["node"])
    return None


async def _destroy(driver: RuntimeDriver, instance_id: str, why: str) -> bool:
    try:
        await driver.info(instance_id)
    except InstanceNotFound:
        return False
    await driver.destroy(instance_id)
    log.warning("destroyed instance %s: %s", instance_id, why)
    return True


Forget = Callable[[str, str], Awaitable[None]]
"""What else the node lets go of a resource (kind, id) whose instance it destroyed as an
orphan: its actor here, a database's proxy and fast path."""


async def destroy_orphans(
    db: Database, node: str, runtime: RuntimeDriver | None, databases: RuntimeDriver | None, *, every_instance: bool,
    forget: Forget | None = None,
) -> int:
    """Destroy what this node runs that is no longer its own: the instances listed for it
    in `lost_instances` (taken over while it was lost), and with `every_instance` (at
    start) each of the runtime's instances whose record names another node that runs
    (a record naming a node that is gone may be this node's own under its old name: it
    is adopted, `take_over`'s `held_here`). Returns how many were destroyed."""
    listed = await db.fetch_all("SELECT instance_id, kind, resource_id FROM lost_instances WHERE node = ?", (node,))
    destroyed = 0
    for row in listed:
        driver = databases if row["kind"] == "database" else runtime
        why = f"its {row['kind']} {row['resource_id']} was taken over by another node while this node was lost"
        if forget is not None:
            await forget(str(row["kind"]), str(row["resource_id"]))
        if driver is not None and await _destroy(driver, str(row["instance_id"]), why):
            destroyed += 1
        await db.execute("DELETE FROM lost_instances WHERE node = ? AND instance_id = ?", (node, row["instance_id"]))
    if runtime is not None and every_instance:
        for info in await runtime.instances():
            home = await _owner(db, info.id)
            if home is not None and home != node and await node_is_live(db, home) and await _destroy(
                runtime, info.id, f"its record names node {home}, which runs, not this node"
            ):
                destroyed += 1
    return destroyed


class OrphanSources(Protocol):
    """What the orphan check reads of the node's runtime."""

    @property
    def started_driver(self) -> RuntimeDriver | None: ...


async def check_orphans_forever(
    db: Database,
    node: str,
    runtime: OrphanSources,
    databases: RuntimeDriver | None,
    *,
    forget: Forget | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Every instance at once (a node that starts), then the listed ones every
    `ORPHAN_CHECK_SECONDS` (a node cut off from the store for a while comes back
    without a restart). A check that fails is logged and tried again."""
    every_instance = True
    while True:
        try:
            await destroy_orphans(db, node, runtime.started_driver, databases, every_instance=every_instance, forget=forget)
            every_instance = False
        except Exception:
            log.warning("checking for instances taken over by other nodes failed", exc_info=True)
        task_status.started()
        task_status = trio.TASK_STATUS_IGNORED
        await trio.sleep(ORPHAN_CHECK_SECONDS)
