"""A draining node's running deployment services, started again on other nodes (issue 30).

A service keeps nothing of its own on its node: what it runs is its version's artifact
(in the blob store, which every node reaches) and its `run_command`. So a drain with
`all` packs nothing for it: a new service of the same version is placed like the
publish placed the first (a node with room, not a draining one), booted there and
health-checked (`service_boot`: that node's `placed_services_forever` boots it), and only
once it is `running` is the one here stopped (`removed`). The router sends a version's
requests to its newest running service, so from the moment the new one is healthy its
requests go there; the old one is stopped `ROUTES_SECONDS` later, once every node's
router has heard of the new one, so no request is left without a service meanwhile. A new service that
does not come up is stopped on its node, and the one here goes on serving; the next
round tries again.
"""

from __future__ import annotations

import dataclasses
import logging

import trio

from corral.actors.nodes import claims, placement
from corral.actors.nodes import store as nodes_store
from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.ids import prefixed
from corral.storage import utc_now_iso

from . import service_billing, service_store
from .messages import StopService
from .service_actor import DeploymentServiceActor
from .service_boot import STOP_WAIT, boot_where_placed
from .service_store import ServiceRecord
from .services import DeploymentServices

log = logging.getLogger("corral.deployments.services")

ROUND_SECONDS = 2.0
"""As often as a drain's other moves (`corral.actors.nodes.moves`)."""
ROUTES_SECONDS = 1.0
"""How long the old service serves on after the routes changed: every node's router
table follows within this (issue 30's goal for routing tables)."""


async def relocate_round(platform: DeploymentServices) -> int:
    """If this node is draining with `all`: start each running service of it again on
    another node and stop it here, one at a time; returns how many moved."""
    here = platform.settings.node_name
    record = await nodes_store.find(platform.db, here)
    if record is None or record.state != nodes_store.DRAINING or record.moving != "all":
        return 0
    rows = await platform.db.fetch_all(
        "SELECT * FROM deployment_services WHERE node = ? AND status = 'running' ORDER BY created_at", (here,)
    )
    moved = 0
    for service in service_store.SERVICES.records(rows):
        try:
            if await relocate(platform, service):
                moved += 1
        except ApiError as exc:
            log.info("deployment service %s did not move off draining node %s now: %s", service.id, here, exc.message)
    return moved


async def relocate(platform: DeploymentServices, old: ServiceRecord) -> bool:
    """`old`'s version served by a new service on another node, then `old` stopped; False
    (and `old` left serving) when the new one did not become healthy."""
    db, here = platform.db, platform.settings.node_name
    demand = placement.Demand("deployment_services", old.size, old.template_id)
    await service_billing.allow_run(platform, old.tenant_id, old.size, old.external_user_id, placed=True)  # 402 / quota 409
    placed = await placement.place(db, here, demand)
    if placed.node == here:  # offered only when this node takes new work
        await claims.release(db, placed.claim_id)
        raise placement.no_room(demand)
    now = utc_now_iso()
    new = dataclasses.replace(
        old, id=prefixed("svc"), status="starting", node=placed.node, process_id=None, restarts=0, error=None,
        last_activity_at=now, created_at=now, updated_at=now,
    )
    current = await boot_where_placed(platform, new, placed.claim_id)  # its node boots it
    if current is None or current.status != "running":
        why = (current.error if current is not None else None) or "it did not start"
        log.warning("deployment service %s: its replacement on node %s did not become healthy (%s); it stays", old.id, placed.node, why)
        return False
    if platform.deployment_sites is not None:  # requests go to the new one now, on every node
        await platform.deployment_sites.reload(old.deployment_id)
        # The other nodes hear of it by a notice (milliseconds): until then their routers
        # still send its requests here, so the old one serves a moment longer.
        await trio.sleep(ROUTES_SECONDS)
    ref = await platform.system.get(DeploymentServiceActor, old.id)
    await ref.ask(StopService(), timeout=STOP_WAIT)
    log.warning("deployment service %s moved off draining node %s: %s runs its version on node %s", old.id, here, new.id, placed.node)
    return True


async def relocate_forever(platform: DeploymentServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """`relocate_round` every `ROUND_SECONDS` (on every node of a shared store: each moves its own)."""
    await run_periodically(
        lambda: relocate_round(platform), lambda: ROUND_SECONDS, "moving deployment services off this draining node",
        wait_first=True, task_status=task_status,
    )
