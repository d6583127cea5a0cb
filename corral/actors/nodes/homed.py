"""One home for a resource that has no instance: its actor runs on one node at a time (issue 30).

A deployment or a custom domain owns no process and no file on any node, yet its actor
keeps the row in memory (`self.record`) and decides from it: two nodes that each kept
an actor of it would answer from different copies, and one would write back fields the
other had changed. So its row names a home (`node`), like an instance's, and its actor
runs only there:

- Requests for it reach the home: the HTTP layer forwards them there
  (`corral.http.forward`, `homes.COLLECTIONS`), so a load balancer in front of the
  nodes changes nothing.
- A node that needs the actor for its own work (a publish run beside its source
  sandbox, the first HTTPS request for a domain through this node's edge, a request
  that came before its forwarding table heard of a move) does not wait for another
  node: it moves the home to itself, one compare-and-set of `node` from what it read,
  and tells the other nodes (`HOME_MOVED`), whose copy of the actor stops
  (`ActorSystem.retire`) and whose forwarding tables read the home again. Nothing of
  the resource lives on a node, so moving costs one row update; a home whose node is
  lost or gone is moved the same way, with nothing to take over.
- Every write of the actor's state is fenced by the home (`UPDATE ... AND node = ?`):
  an actor whose home moved meanwhile, before its node heard so, writes nothing, stops
  and answers 503, so a stale copy never undoes what the new home wrote.

Instance-backed resources keep their stricter rule (`InstanceActor.refuse_if_homed_elsewhere`):
their instance is on the home, so another node refuses rather than moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from corral.actors.record import RecordActor
from corral.errors import ApiError
from corral.storage import Database

from . import homes

log = logging.getLogger("corral.nodes.homed")

HOME_MOVED = "home-moved"
"""Notice topic: the subject `<kind>/<id>` names a resource whose home moved to its sender."""


class LivesElsewhere(ApiError):
    """The resource's home moved to another node while this node's actor served it."""

    def __init__(self, kind: str, node: str | None) -> None:
        where = f"node {node}" if node else "another node"
        super().__init__(503, "SERVICE_UNAVAILABLE", f"this {kind} moved to {where} meanwhile; try again")


async def move_home(db: Database, table: str, id_column: str, resource_id: str, *, seen: str | None, to: str) -> bool:
    """Make `to` the home of the row, if its home is still `seen` (compare-and-set)."""
    changed = await db.execute(
        f"UPDATE {table} SET node = ? WHERE {id_column} = ? AND node IS NOT DISTINCT FROM ?", (to, resource_id, seen)
    )
    return changed == 1


class HomedActor(RecordActor):
    """A record actor whose row has a home (`node`) and that moves it to the node where it
    is activated (see the module docstring). The record type has a `node` field."""

    gone_states: ClassVar[tuple[str, ...]] = ()
    """States of a resource that is no more: its actor is not activated (404), nor its home moved."""

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state in self.gone_states:
            raise self.not_found()
        await self.take_home()

    async def take_home(self) -> None:
        here = self.services.settings.node_name
        seen = getattr(self.record, "node", None)
        if seen == here:
            return
        if not await move_home(self.db, self.store.table, self.store.id_column, self.id, seen=seen, to=here):
            raise LivesElsewhere(self.kind, await self.store.value(self.db, self.id, "node"))
        self.record = self.store.replaced(self.record, {"node": here})
        if seen is not None:
            log.info("%s %s: home moved from node %s to this node", self.kind, self.id, seen)
            self.services.notices.tell_others(HOME_MOVED, f"{self.kind}/{self.id}")

    async def _update(self, values: dict[str, Any]) -> None:
        here = self.services.settings.node_name
        if await self.store.update(self.db, self.id, values, where={"node": here}):
            return
        current = await self.store.load(self.db, self.id)
        if current is None:
            raise self.not_found()
        self.retire()
        raise LivesElsewhere(self.kind, current.node)


def hear_home_moves(notices: Any, retire: Callable[[str, str], None]) -> None:
    """On this node, stop the actor of a resource whose home another node took, and read
    its home afresh before forwarding a request for it (`homes.left_this_node`)."""

    def moved(subject: str | None) -> None:
        if subject is None:  # notices were missed: forwarding tables expire on their own (2 s)
            return
        kind, _, resource_id = subject.partition("/")
        homes.left_this_node(resource_id)
        retire(kind, resource_id)

    notices.listen(HOME_MOVED, moved)
