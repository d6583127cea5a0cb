"""The gate every new instance passes on its node (contract §20): a draining node takes
no new work. Until placement chooses another node (issue 30), a create on a draining
node is refused with `503 SERVICE_UNAVAILABLE`, as a node past its disk reserve is.

Its own module, with no import of the resource packages, because their create paths
(billing's allowance, the database service) call it.
"""

from __future__ import annotations

from corral.errors import ApiError
from corral.storage import Database

from .store import DRAINING, NODES


async def require_accepting_work(db: Database, node_name: str) -> None:
    """`503 SERVICE_UNAVAILABLE` while this node is draining."""
    if await NODES.value(db, node_name, "state") == DRAINING:
        raise ApiError(
            503, "SERVICE_UNAVAILABLE",
            f"node {node_name} is draining: it takes no new instances until it restarts",
        )
