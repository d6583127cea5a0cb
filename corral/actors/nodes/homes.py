"""Where an instance-backed resource lives: this node, or another live node (issue 30).

Every sandbox, computer, database and deployment service row names its home in
`node`. Only that node runs the resource's actor and talks to its instance (its agent
listens on that node's bridge, unreachable from the others); a deployment's and a custom
domain's row names the one node that runs its actor (`homed`). So a request for it that reaches another node
is forwarded there (`corral.http.forward`). `Homes.elsewhere` answers the question the
HTTP layer asks before serving such a request: the other node to forward it to, or
None to serve it here.

It is asked on every request for a resource, so answers are cached: a resource's
home for `RESOURCE_SECONDS` (a home changes only when the resource is re-placed) and
the nodes table for `NODES_SECONDS` (so a node that became lost stops being forwarded
to within about that, on top of the 6 s a heartbeat takes to go stale). A cached home
that is no longer live is read again at once: a take-over moves the home, and the
request goes to the new one rather than being served here for the rest of the
cache's time. A resource of
a lost node is served here, where its actor finds no instance and says so. On a store
that only one node may use (SQLite) every resource is this node's, and nothing is read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from corral.storage import Database

from . import store

COLLECTIONS = {
    "sandboxes": "SELECT node FROM sandboxes WHERE id = ?",
    "computers": "SELECT node FROM computers WHERE id = ?",
    "databases": "SELECT node FROM databases WHERE id = ?",
    "deployments": "SELECT node FROM deployments WHERE id = ?",
    "custom-domains": "SELECT node FROM custom_domains WHERE id = ?",
    "deployment-services": "SELECT node FROM deployment_services WHERE id = ?",
    "sandbox-template-builds": "SELECT node FROM sandbox_template_builds WHERE id = ?",
    "sandbox-templates": (
        "SELECT b.node FROM sandbox_template_builds b JOIN sandbox_templates t ON t.id = b.template_id"
        " WHERE ? IN (t.id, t.name) AND b.status IN ('queued', 'building') ORDER BY b.created_at DESC LIMIT 1"
    ),
    "agent-runs": (
        "SELECT COALESCE(sandboxes.node, computers.node) AS node FROM agent_runs"
        " LEFT JOIN sandboxes ON agent_runs.target_kind = 'sandbox' AND sandboxes.id = agent_runs.target_id"
        " LEFT JOIN computers ON agent_runs.target_kind = 'computer' AND computers.id = agent_runs.target_id"
        " WHERE agent_runs.id = ?"
    ),
}
"""The API's collection names of resources with a home, and how to read it. A
deployment's and a custom domain's home is the node its actor runs on (`homed`); a
deployment service's, the node its instance runs on (a deployment's services may run on
other nodes than the deployment's). An agent run's home is its target's: its actor follows a process in the target's agent
there, and its live events are announced on that node's bus only. A template build's
home is the node that runs it; a template's, its running build's (whose cancel a
delete is), by id or name (a name another tenant also uses may send the request to
that tenant's build's node, which serves it all the same); a template without a
running build has none."""
RESOURCE_SECONDS = 2.0
NODES_SECONDS = 1.0
MAX_CACHED = 50_000


_LEFT: dict[str, float] = {}


def left_this_node(resource_id: str) -> None:
    """A resource this node hosted lives on another node now (a drain moved it): its
    home is read afresh here for the next `RESOURCE_SECONDS`, and a request that was
    forwarded here for it meanwhile goes on to its new home (`moved_away`)."""
    _LEFT[resource_id] = time.monotonic()


def moved_away(resource_id: str) -> bool:
    """Whether the resource left this node in the last `RESOURCE_SECONDS`."""
    left = _LEFT.get(resource_id)
    if left is None:
        return False
    if time.monotonic() - left < RESOURCE_SECONDS:
        return True
    del _LEFT[resource_id]
    return False


@dataclass(frozen=True)
class Home:
    """Another node, where a resource lives."""

    name: str
    url: str
    """Its advertised internal URL (`--advertise`), without a trailing slash."""


async def node_is_live(db: Database, name: str) -> bool:
    """Whether the node `name` runs now (active or draining, with a fresh heartbeat)."""
    record = await store.find(db, name)
    return record is not None and store.seen_state(record, store.lost_before()) != store.LOST


class Homes:
    def __init__(self, db: Database, node_name: str, *, shared: bool) -> None:
        self.db = db
        self.node_name = node_name
        self.shared = shared
        """Several nodes may use the store (PostgreSQL); else every resource is this node's."""
        self._resources: dict[tuple[str, str], tuple[str | None, float]] = {}
        self._nodes: dict[str, Home] = {}
        self._nodes_read = -NODES_SECONDS

    async def elsewhere(self, collection: str, resource_id: str) -> Home | None:
        """The live node other than this one where the resource lives; None when it is
        this node's, unknown (the route answers its 404), or on a lost node."""
        query = COLLECTIONS.get(collection)
        if not self.shared or query is None:
            return None
        node = await self._node_of(query, resource_id)
        if node is None or node == self.node_name:
            return None
        live = await self._live_nodes()
        if node not in live:  # a home that is lost may have been taken over since: read it again
            node = await self._node_of(query, resource_id, fresh=True)
            if node is None or node == self.node_name:
                return None
        return live.get(node)

    async def _node_of(self, query: str, resource_id: str, *, fresh: bool = False) -> str | None:
        now = time.monotonic()
        cached = self._resources.get((query, resource_id))
        if cached is not None and now - cached[1] < RESOURCE_SECONDS and not fresh and not moved_away(resource_id):
            return cached[0]
        row = await self.db.fetch_one(query, (resource_id,))
        node = None if row is None or row["node"] is None else str(row["node"])
        if len(self._resources) >= MAX_CACHED:
            self._resources.clear()
        self._resources[(query, resource_id)] = (node, now)
        return node

    async def _live_nodes(self) -> dict[str, Home]:
        now = time.monotonic()
        if now - self._nodes_read >= NODES_SECONDS:
            lost_since = store.lost_before()
            self._nodes = {
                record.name: Home(record.name, record.advertise_url.rstrip("/"))
                for record in await store.all_nodes(self.db)
                if store.seen_state(record, lost_since) != store.LOST and record.name != self.node_name
            }
            self._nodes_read = now
        return self._nodes
