"""The `nodes` table: one row per node of the cluster (contract §20), as `NodeRecord`s.

Only the node's actor writes its row (`actor.py`); anyone reads. Whether a node is
`lost` is not stored but seen: its heartbeat is older than `LOST_AFTER_SECONDS`, or it
stopped cleanly (its `boot_id` cleared as it left).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from corral.actors.record import RowStore
from corral.storage import Database, Transaction, to_iso, utc_now

HEARTBEAT_SECONDS = 2.0
"""How often a node renews its heartbeat (and reports its load)."""
LOST_AFTER_SECONDS = 6.0
"""A node whose heartbeat is older than this is `lost` (issue 30: within 10 s)."""

ACTIVE, DRAINING, LOST = "active", "draining", "lost"


@dataclass(frozen=True)
class NodeRecord:
    name: str
    advertise_url: str
    region: str
    state: str
    """`active` or `draining` as stored; `lost` is seen, never stored (`seen_state`)."""
    boot_id: str
    """This run of the node: a restarted node has a new one; empty once it stopped cleanly."""
    started_at: str
    heartbeat_at: str
    cores: int
    memory_mb: int
    disk_free_mb: int
    instances: int
    """Instances the node runs, its warm pool's included."""
    pooled: int
    """Of those, the warm pool's (booted, unassigned)."""
    memory_mb_used: int
    templates: list[str] = field(hash=False)
    max_instances: int
    """Placement's limits on this node (`placement.py`): resources it hosts, 0 none."""
    max_memory_mb: int
    """The sum of their sizes' memory, 0 none."""
    disk_reserve_mb: int
    """It takes nothing new below this much free disk (its own create gate, too)."""
    updated_at: str
    advertise_preview_url: str = ""
    """Where the other nodes' preview routers relay requests for this node's instances
    (`--advertise-preview`); empty: nowhere (they are served only through this node)."""
    moving: str | None = None
    """What its drain moves to other nodes (`moves.py`): `stopped`, `all`, or None."""


NODES = RowStore("nodes", NodeRecord, id_column="name", json_columns=("templates",))


def lost_before() -> str:
    """Heartbeats older than this (ISO 8601) are of lost nodes."""
    return to_iso(utc_now() - timedelta(seconds=LOST_AFTER_SECONDS))


def seen_state(record: NodeRecord, lost_since: str) -> str:
    """`lost` for a node whose heartbeat stopped or that stopped cleanly, else as stored."""
    return LOST if record.heartbeat_at < lost_since or not record.boot_id else record.state


async def all_nodes(db: Database) -> list[NodeRecord]:
    return await NODES.where(db, [], order_by="name")


async def find(db: Database, name: str) -> NodeRecord | None:
    return await NODES.load(db, name)


def live_others(tx: Transaction, name: str, lost_since: str) -> list[str]:
    """Names of the other nodes running now: a fresh heartbeat, and not stopped cleanly."""
    rows = tx.fetch_all(
        "SELECT name FROM nodes WHERE name <> ? AND heartbeat_at >= ? AND boot_id <> '' ORDER BY name", (name, lost_since)
    )
    return [str(row["name"]) for row in rows]


def active_instead(tx: Transaction, name: str, lost_since: str) -> str | None:
    """When node `name` is draining: another node that runs and takes new work, which
    should take on what `name` would (None: `name` is active, or no other node is)."""
    if tx.fetch_value("SELECT state FROM nodes WHERE name = ?", (name,)) != DRAINING:
        return None
    row = tx.fetch_one(
        "SELECT name FROM nodes WHERE name <> ? AND state = ? AND heartbeat_at >= ? AND boot_id <> '' ORDER BY name LIMIT 1",
        (name, ACTIVE, lost_since),
    )
    return None if row is None else str(row["name"])


_HOLDS_AN_INSTANCE = "NOT (status = 'error' AND COALESCE(error, '') LIKE 'NODE_LOST:%')"
"""Not a resource whose instance went with a lost node (`lost.lost_text`): the node that
took it over holds nothing of it but its row, so it takes no room there and a drain
has nothing to move (it stays until deleted)."""
HOSTED = {
    "sandboxes": f"status != 'destroyed' AND {_HOLDS_AN_INSTANCE}",
    "computers": _HOLDS_AN_INSTANCE,  # a deleted computer's row is gone
    "databases": f"status != 'deleted' AND {_HOLDS_AN_INSTANCE}",
    "deployment_services": f"status != 'destroyed' AND {_HOLDS_AN_INSTANCE}",
    "sandbox_template_builds": "status IN ('queued', 'building')",
}
"""The tables of resources with a home (`node`), and which of their rows still live
there: what a node's `resources` counts and placement's room check weighs."""


async def hosted_counts(db: Database) -> dict[str | None, int]:
    """Live resources by the node that hosts them."""
    counts: dict[str | None, int] = {}
    for table, live in HOSTED.items():
        for row in await db.fetch_all(f"SELECT node, COUNT(*) AS n FROM {table} WHERE {live} GROUP BY node"):
            counts[row["node"]] = counts.get(row["node"], 0) + int(row["n"])
    return counts


def adopt_homeless(tx: Transaction, name: str) -> None:
    """On a one-node store: every resource without a node is `name`'s (made before nodes
    were recorded, or under a name the store no longer has)."""
    for table in HOSTED:
        tx.execute(f"UPDATE {table} SET node = ? WHERE node IS NULL OR node <> ?", (name, name))


def forget_others(tx: Transaction, name: str) -> None:
    """Every row but `name`'s (a one-node store's rows of names it no longer has)."""
    tx.execute("DELETE FROM nodes WHERE name <> ?", (name,))
