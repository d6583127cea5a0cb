"""A sandbox's or computer's bindings and policy go with it.

The egress package listens for the end of a resource on the bus (`sandbox.destroyed`,
`computer.deleted`) rather than being told by the instance kinds, which know nothing
of egress; resources that went while no node listened are swept at start.
"""

from __future__ import annotations

import logging

import trio

from corral.actors.bus import SubscriberLagged

from . import store
from .services import EgressServices

log = logging.getLogger("corral.egress")

ENDINGS = ("sandbox.destroyed", "computer.deleted")


async def forget(services: EgressServices, resource_id: str) -> None:
    await services.db.transaction(lambda tx: store.forget_resource(tx, resource_id))


async def sweep(services: EgressServices) -> int:
    """Forget every resource that bindings or policies still name but that is gone."""
    gone = await store.orphaned_resources(services.db)
    for resource_id in gone:
        await forget(services, resource_id)
    return len(gone)


async def forget_gone_resources(services: EgressServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Sweep, then forget each resource as it ends (until cancelled)."""
    started = False
    while True:
        with services.bus.subscribe(types=ENDINGS) as events:
            swept = await sweep(services)
            if swept:
                log.info("forgot the egress bindings and policies of %d resource(s) that went", swept)
            if not started:
                task_status.started()
                started = True
            try:
                async for event in events:
                    await forget(services, event.resource_id)
            except SubscriberLagged:
                continue
