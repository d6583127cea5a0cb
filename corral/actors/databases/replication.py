"""Replicas on other nodes, and their promotion when a primary's node is lost (issue 30).

A replica goes to another node than its primary's when one has room (placement's
`away_from`), so that it outlives the primary's node. It streams from the primary's
server over TCP, at the primary's node's `--advertise` host and the server's own port,
as the replication role with a password both nodes derive from the cluster's secret.

When the primary's node is lost, each node that runs a running replica of it tries to
take the primary over (`promote_lost_primaries`, every `lost.SWEEP_SECONDS`); the
take-over is the one compare-and-set every take-over is, so one node wins, and its
primary actor promotes the replica it has (`DatabaseActor.recover_here`). The
cluster's sweep of lost resources leaves such primaries to them (`lost.sweep`'s
`deferred`), so they do not read `NODE_LOST` first.

A primary with running replicas on other nodes commits synchronously: a commit is
acknowledged once every one of them has flushed it (`synchronous_standby_names`, kept
by the primary's node: `keep_waiting_forever`), so the replica promoted when the
primary's node dies has every write a client was told was committed. A replica is waited for
from when it first streams from the primary; one whose node is lost stops being waited
for as soon as its node is seen lost; one being deleted, as soon as its deletion
begins. When a primary is promoted from one replica, its other replicas (streaming from
the server that was lost, and perhaps holding WAL the promoted one never had) cannot
follow it: each one's node ends it `error`, to be deleted and added again. A primary that cannot reach the store keeps
waiting for its replicas: once one of them is promoted elsewhere, a primary cut off
from the cluster acknowledges no more writes (no two primaries both take writes).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import trio

from corral.actors.nodes import lost
from corral.actors.nodes import store as nodes_store
from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.storage import Database
from corral.vm.postgres import PostgresDriver, replica_name

from . import store
from .messages import PrimaryMoved, WaitForReplicas
from .node import DatabaseNode
from .store import DatabaseRecord

log = logging.getLogger("corral.databases.replication")

DEFERRED = (
    "NOT EXISTS (SELECT 1 FROM databases replica WHERE replica.primary_id = databases.id"
    " AND replica.status = 'running' AND replica.node IS NOT NULL AND replica.node NOT IN ({lost}))"
)
"""A lost primary the cluster's sweep leaves to the node of a running replica of it."""


def advertised_host(advertise_url: str) -> str | None:
    """The host part of a node's advertised URL: where its database servers are reached."""
    return urlsplit(advertise_url).hostname


async def node_host(db: Database, node_name: str) -> str | None:
    """Where the node `node_name`'s database servers and proxy are reached: the host of
    its advertised URL; None when the cluster has no such node."""
    home = await nodes_store.find(db, node_name)
    return advertised_host(home.advertise_url) if home is not None else None


async def primary_source(db: Database, node_name: str, node: DatabaseNode, primary_id: str) -> tuple[str, int] | None:
    """Where a new replica streams from when its primary is another node's: that node's
    advertised host and the primary server's own port; None when it is this node's."""
    row = await db.fetch_one("SELECT node, port FROM databases WHERE id = ?", (primary_id,))
    if row is None or row["node"] in (None, node_name):
        return None
    host = await node_host(db, str(row["node"]))
    if not host:
        raise ApiError(503, "SERVICE_UNAVAILABLE", f"the primary's node {row['node']} is not in the cluster")
    return host, node.server_port(int(row["port"]))


async def local_replica(db: Database, node_name: str, primary_id: str, servers: PostgresDriver) -> DatabaseRecord | None:
    """A running replica of the primary on this node, whose server this node has."""
    for replica in await store.replicas_of(db, primary_id):
        if replica.node == node_name and replica.status == "running" and servers.layout.load(replica.id) is not None:
            return replica
    return None


async def promote_lost_primaries(db: Database, refs: lost.Refs, node_name: str, actor_class: type) -> int:
    """Take over here every primary of a lost node that has a running replica here (its
    actor promotes the replica); returns how many were tried."""
    gone = await lost.lost_nodes(db, node_name)
    if not gone:
        return 0
    marks = ", ".join("?" for _ in gone)
    rows = await db.fetch_all(
        "SELECT DISTINCT databases.id FROM databases JOIN databases replica ON replica.primary_id = databases.id"
        f" WHERE databases.node IN ({marks}) AND databases.status NOT IN ('deleted', 'error')"
        " AND replica.node = ? AND replica.status = 'running'",
        (*gone, node_name),
    )
    for row in rows:
        try:
            await refs.get(actor_class, str(row["id"]))
        except ApiError as exc:
            log.info("database %s of a lost node was not taken over here: %s", row["id"], exc.message)
    return len(rows)


async def promote_forever(
    db: Database, refs: lost.Refs, node_name: str, actor_class: type, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """`promote_lost_primaries` every `lost.SWEEP_SECONDS`, on every node (not leased:
    only the node with the replica can promote it); a round that fails is logged."""
    task_status.started()
    while True:
        try:
            await promote_lost_primaries(db, refs, node_name, actor_class)
        except Exception:
            log.warning("promoting replicas of lost primaries failed", exc_info=True)
        await trio.sleep(lost.SWEEP_SECONDS)


PROMOTING_STATUS = "restarting"
"""What a primary taken over from a lost node reads while its replica here is promoted
(`DatabaseActor.recovering_state`): until it runs, none of this node's replicas of it
is ended as an orphan (the one being promoted must reach its hand-over)."""

WAITING_SECONDS = 0.5
"""How often a node brings its primaries' waited-for replicas up to date."""
WAITED_SQL = (
    "SELECT p.id AS primary_id, r.id AS replica_id, r.node AS replica_node FROM databases p"
    " LEFT JOIN databases r ON r.primary_id = p.id AND r.status = 'running' AND r.node IS NOT NULL AND r.node <> p.node"
    " WHERE p.node = ? AND p.role = 'primary' AND p.status NOT IN ('creating', 'deleted', 'error')"
)
"""This node's primaries, each with its running replicas on other nodes (a row per pair,
or one with no replica)."""


class ReplicaWaits:
    """Which replicas each of this node's primaries waits for, brought up to date with
    the store: each change goes through the primary's actor (`WaitForReplicas`), which
    adds a replica once it streams from the primary. And this node's replicas whose
    primary was promoted on another node from another replica: each one's actor ends it
    (`PrimaryMoved`)."""

    def __init__(self, db: Database, refs: lost.Refs, node_name: str, servers: PostgresDriver, actor_class: type) -> None:
        self.db, self.refs, self.node_name, self.servers, self.actor_class = db, refs, node_name, servers, actor_class
        self.known: dict[str, list[str]] = {}
        """What each primary's server waits for, as last set (read from it once)."""

    async def wanted(self) -> dict[str, list[str]]:
        gone = set(await lost.lost_nodes(self.db, self.node_name))
        wanted: dict[str, list[str]] = {}
        for row in await self.db.fetch_all(WAITED_SQL, (self.node_name,)):
            replicas = wanted.setdefault(str(row["primary_id"]), [])
            if row["replica_id"] is not None and row["replica_node"] not in gone:
                replicas.append(str(row["replica_id"]))
        return wanted

    async def round(self) -> int:
        """Bring every primary here up to date, and end this node's replicas of a moved
        primary; returns how many primaries changed."""
        await self.end_orphaned_replicas()
        changed = 0
        for primary_id, replica_ids in (await self.wanted()).items():
            names = sorted(replica_name(replica_id) for replica_id in replica_ids)
            if primary_id not in self.known:
                if self.servers.layout.load(primary_id) is None:
                    continue  # its server is not (yet) this node's
                self.known[primary_id] = self.servers.waited_replicas(primary_id)
            if self.known[primary_id] == names:
                continue
            try:
                ref = await self.refs.get(self.actor_class, primary_id)
                now: list[str] = await ref.ask(WaitForReplicas(tuple(replica_ids)), timeout=30)
            except Exception as exc:
                log.warning("database %s: its replicas to wait for (%s) were not set: %s", primary_id, names, exc)
                self.known.pop(primary_id, None)  # read again next round
                continue
            if now != self.known[primary_id]:
                log.info("database %s now waits for replicas %s", primary_id, now or "none")
                changed += 1
            self.known[primary_id] = now  # asked again next round while a candidate has not streamed yet
        return changed

    async def end_orphaned_replicas(self) -> None:
        rows = await self.db.fetch_all(
            "SELECT r.id, p.node AS primary_node, p.status AS primary_status, n.advertise_url"
            " FROM databases r JOIN databases p ON p.id = r.primary_id"
            " LEFT JOIN nodes n ON n.name = p.node"
            " WHERE r.node = ? AND r.status = 'running' AND p.node IS NOT NULL AND p.status NOT IN ('deleted', 'error')",
            (self.node_name,),
        )
        for row in rows:
            replica_id, primary_node = str(row["id"]), str(row["primary_node"])
            if self.servers.layout.load(replica_id) is None:
                continue
            streams_from = self.servers.upstream_host(replica_id)
            if not streams_from:
                continue  # over its primary's socket, on this node
            host = advertised_host(str(row["advertise_url"] or ""))
            if primary_node != self.node_name and host == streams_from:
                continue  # still its primary's
            if primary_node == self.node_name and row["primary_status"] == PROMOTING_STATUS:
                continue  # its primary is being promoted here, perhaps from this very replica
            try:
                ref = await self.refs.get(self.actor_class, replica_id)
                if await ref.ask(PrimaryMoved(primary_node), timeout=60):
                    log.warning("replica %s streamed from %s, no longer its primary's (now on node %s)", replica_id, streams_from, primary_node)
            except Exception as exc:
                log.warning("replica %s of a moved primary was not ended: %s", replica_id, exc)


async def keep_waiting_forever(
    db: Database, refs: lost.Refs, node_name: str, servers: PostgresDriver, actor_class: type,
    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`ReplicaWaits.round` every `WAITING_SECONDS` (each node for its own primaries)."""
    waits = ReplicaWaits(db, refs, node_name, servers, actor_class)
    await run_periodically(
        waits.round, lambda: WAITING_SECONDS, "keeping primaries' synchronous replicas", wait_first=False, task_status=task_status
    )
