"""Placement: which node a new sandbox, computer or database server goes to (issue 30).

The policy (docs/api.md "Nodes", "Placement"):

1. **Candidates** are the nodes that take new work: `active` (not draining) with a
   fresh heartbeat, and in the region asked for, when one is (`region` in the create's
   body, one of `CORRAL_REGIONS`; a node's region is `CORRAL_NODE_REGION`).
2. **Room.** A candidate has room for a resource of size S when it is not below its
   disk reserve (free disk as its last heartbeat reported it, against
   `CORRAL_DISK_RESERVE_GB`: the same gate its own create path has), and the resources
   placed on it (live rows naming it, plus claims still open), one more counted,
   stay within its `CORRAL_NODE_MAX_INSTANCES`, and the sum of their sizes' memory,
   S's added, within its `CORRAL_NODE_MAX_MEMORY_MB` (each 0: no limit). Sizes are
   limits, not reservations (an idle sandbox uses a few MiB of its 4 GiB), so memory
   is counted against what the operator lets a node promise, not its RAM.
3. **Order.** Among those with room: for a replica, a node other than its primary's
   first (so that it outlives the primary's node); for a deployment's service, the
   node of its newest live service first (a deployment's services together); then a
   node that has the template built first (a
   sandbox's built-in template, a computer's desktop); then the least loaded (resources
   placed per core); then the node the request reached (no hop); then the most memory
   available as last reported; then by name.
4. **None with room**: `503 SERVICE_UNAVAILABLE` saying why (`Retry-After: 5`).

The check and the claim are one PostgreSQL transaction under an advisory lock, so
placements on every node are serialised: the room one sees includes every claim made
before, and two never take the same last room. Each resource counts once, as its claim
until its row exists and as its row from then on (`claims.py`). Fork, clone and branch are not placed: they are requests on their source's id,
which go to the source's home (`corral.http.forward`). A replica is placed, away from
its primary's node (`databases.replication`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from corral.errors import ApiError, validation_error
from corral.ids import new_ulid
from corral.storage import Database, Transaction
from corral.vm import SIZES

from . import claims
from .store import ACTIVE, HOSTED, NODES, NodeRecord, lost_before, seen_state

PLACEMENT_LOCK = 7_426_611_030
"""Any constant: serialises placements across nodes (`pg_advisory_xact_lock`)."""
RETRY_AFTER = "5"
SIZE_NAMES = frozenset(SIZES)
KIND_NAMES = {"sandboxes": "sandbox", "computers": "computer", "databases": "database server", "deployment_services": "deployment service",
              "sandbox_template_builds": "template build"}


@dataclass(frozen=True)
class Demand:
    """What a create asks for, as placement reads it from the request's body."""

    kind: str
    """The table its row goes to: `sandboxes`, `computers`, `databases`, `deployment_services`
    or `sandbox_template_builds`."""
    size: str
    template: str | None = None
    """The runtime template it boots from, when placement can tell."""
    region: str | None = None
    away_from: str | None = None
    """A node to avoid while another has room: a replica's primary's (it is to outlive it)."""
    near: str | None = None
    """A node to prefer while it has room: a deployment's service's (its services together)."""

    @property
    def memory_mb(self) -> int:
        return SIZES[self.size].memory_mb


@dataclass(frozen=True)
class Placed:
    node: str
    url: str
    """The node's advertised URL, without a trailing slash."""
    claim_id: str


@dataclass
class Usage:
    """What is placed on a node: live resources and open claims, and their sizes' memory."""

    resources: int = 0
    memory_mb: int = 0


def has_room(node: NodeRecord, usage: Usage, demand: Demand) -> bool:
    if node.disk_reserve_mb and node.disk_free_mb < node.disk_reserve_mb:
        return False
    if node.max_instances and usage.resources + 1 > node.max_instances:
        return False
    return not (node.max_memory_mb and usage.memory_mb + demand.memory_mb > node.max_memory_mb)


def candidates(nodes: list[NodeRecord], demand: Demand, lost_since: str) -> list[NodeRecord]:
    """The nodes that take new work in the region asked for."""
    return [
        node for node in nodes
        if seen_state(node, lost_since) == ACTIVE and (demand.region is None or node.region == demand.region)
    ]  # fmt: skip


def choose(nodes: list[NodeRecord], usage: dict[str, Usage], demand: Demand, here: str) -> NodeRecord | None:
    """The candidate to place on (the policy's order), or None when none has room."""
    roomy = [node for node in nodes if has_room(node, usage.get(node.name, Usage()), demand)]
    if not roomy:
        return None

    def order(node: NodeRecord) -> tuple[int, int, int, float, int, int, str]:
        apart = node.name != demand.away_from
        near = node.name == demand.near
        cached = demand.template is None or demand.template in node.templates
        load = usage.get(node.name, Usage()).resources / max(node.cores, 1)
        available = node.memory_mb - node.memory_mb_used
        return (0 if apart else 1, 0 if near else 1, 0 if cached else 1, load, 0 if node.name == here else 1, -available, node.name)

    return min(roomy, key=order)


def usage_by_node(tx: Transaction) -> dict[str, Usage]:
    """What is placed on each node: live rows, and claims whose row does not exist yet,
    read in one statement (one snapshot), so that each resource counts once (`claims.py`)."""
    claims.forget_expired(tx)
    parts = [
        f"SELECT node, size, COUNT(*) AS n, 0 AS claimed_mb FROM {table} WHERE ({live}) AND node IS NOT NULL GROUP BY node, size"
        for table, live in HOSTED.items()
    ]
    parts.append(f"SELECT node, '' AS size, COUNT(*) AS n, SUM(memory_mb) AS claimed_mb FROM ({claims.unresolved_sql()}) u GROUP BY node")
    usage: dict[str, Usage] = defaultdict(Usage)
    for row in tx.fetch_all(" UNION ALL ".join(parts)):
        count, node = int(row["n"]), str(row["node"])
        limits = SIZES.get(str(row["size"]))
        usage[node].resources += count
        usage[node].memory_mb += count * limits.memory_mb if limits is not None else int(row["claimed_mb"] or 0)
    return usage


def _claim(tx: Transaction, here: str, demand: Demand, claim_id: str) -> NodeRecord | ApiError:
    if tx.dialect == "postgresql":
        tx.execute("SELECT pg_advisory_xact_lock(?)", (PLACEMENT_LOCK,))
    nodes = candidates(NODES.records(tx.fetch_all("SELECT * FROM nodes")), demand, lost_before())
    if not nodes:
        return no_node(demand)
    chosen = choose(nodes, usage_by_node(tx), demand, here)
    if chosen is None:
        return no_room(demand)
    claims.insert(tx, claim_id, chosen.name, demand.kind, demand.memory_mb)
    return chosen


async def place(db: Database, here: str, demand: Demand) -> Placed:
    """Choose a node for `demand` and hold room there (a claim); 503 when none has room.
    `here`: the node the request reached, preferred among equals."""
    claim_id = new_ulid()
    chosen = await db.transaction(lambda tx: _claim(tx, here, demand, claim_id))
    if isinstance(chosen, ApiError):
        raise chosen
    return Placed(chosen.name, chosen.advertise_url.rstrip("/"), claim_id)


def _what(demand: Demand) -> str:
    return f"a {demand.size} {KIND_NAMES.get(demand.kind, 'resource')}"


def no_node(demand: Demand) -> ApiError:
    if demand.region is not None:
        message = f"no active node serves region {demand.region!r}: {_what(demand)} cannot be placed there now"
    else:
        message = f"no active node takes new work (every node is draining or lost): {_what(demand)} cannot be placed now"
    return ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": RETRY_AFTER})


def no_room(demand: Demand) -> ApiError:
    where = f" in region {demand.region!r}" if demand.region is not None else ""
    message = (
        f"no node{where} has room for {_what(demand)}: every active node is at its limit of instances or memory,"
        " or below its disk reserve; try again later"
    )
    return ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": RETRY_AFTER})


def region_of(regions: str, node_region: str, asked: str | None) -> str:
    """The region of a new resource: the one its create asked for (`422` unless one of
    `CORRAL_REGIONS`; placement put it on a node there), else this node's."""
    if asked is None:
        return node_region
    offered = [name.strip() for name in regions.split(",") if name.strip()] or ["local"]
    if asked not in offered:
        raise validation_error({"region": f"unknown region; one of {', '.join(offered)}"})
    return asked
