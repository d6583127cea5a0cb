"""The cluster's nodes as the API shows them, and this node's membership (contract §20).

`join` runs when the node starts: its row made or taken over (a new boot id, state
`active`), refused on a SQLite store that another live node serves. `keep_alive` then
sends a `Heartbeat` with the node's capacity and load every `HEARTBEAT_SECONDS`;
`describe` is the shape of `GET /api/v1/admin/nodes`, where a node whose heartbeat is
older than `LOST_AFTER_SECONDS` is `lost`.

Only membership (and the drain's gate, `gate.py`) is here so far: placement, one home per resource, forwarding and
re-placing a lost node's work are issue 30's next steps (docs/api.md "Nodes").
"""

from __future__ import annotations

import logging
import os
from typing import Any

import trio

from corral.actors.node_status import NodeSources, data_disk, running_instances
from corral.actors.runtime import memory_available_mb, memory_total_mb
from corral.ids import new_ulid
from corral.storage import Database
from corral.vm.templates import RECIPES

from . import store
from .actor import (
    Drain,
    Heartbeat,
    Join,
    Leave,
    NodeActor,
    NodeLoad,
    SecondNodeRefused,
    node_not_found,
)
from .store import HEARTBEAT_SECONDS, NodeRecord

log = logging.getLogger("corral.nodes")

NodeServices = NodeSources
"""What membership reads: what the operator views read (the node's `Platform` is one)."""

MIB = 1024 * 1024


async def measure(platform: NodeServices) -> NodeLoad:
    """This node's capacity and load now (cheap: a few file reads), as the operator
    views read them."""
    disk = data_disk(platform.settings)
    instances = await running_instances(platform.runtime)
    pooled = len(platform.warm_pool.pooled_ids()) if platform.warm_pool is not None else 0
    templates = platform.runtime.templates
    total = memory_total_mb()
    return NodeLoad(
        cores=os.cpu_count() or 1, memory_mb=total, disk_free_mb=disk[1] // MIB if disk else 0, instances=instances,
        pooled=min(pooled, instances), memory_mb_used=max(0, total - memory_available_mb()),
        templates=sorted(name for name in RECIPES if templates.is_built(name)),
        max_instances=platform.settings.node_max_instances, max_memory_mb=platform.settings.node_max_memory_mb,
        disk_reserve_mb=round(platform.settings.disk_reserve_gb * 1024),
    )


async def join(platform: NodeServices) -> NodeRecord:
    """Register this node (or take over its row from its last run) as `active`; raises
    `SecondNodeRefused` on a SQLite store another live node serves."""
    settings = platform.settings
    message = Join(
        advertise_url=settings.advertise_url, region=settings.node_region, boot_id=new_ulid(),
        load=await measure(platform), single_node=platform.db.dialect == "sqlite",
        advertise_preview_url=settings.advertise_preview_url,
    )
    name = settings.node_name
    if message.single_node:
        others = await platform.db.transaction(lambda tx: store.live_others(tx, name, store.lost_before()))
        if others:
            raise SecondNodeRefused(
                f"this SQLite store is served by node {others[0]!r} (its heartbeat is fresh): several nodes need a"
                " PostgreSQL store (CORRAL_DATABASE_URL=postgresql://...); to replace that node, stop it first"
            )
    if await store.find(platform.db, name) is None:
        ref = await platform.system.create(NodeActor, name, message)
    else:
        ref = await platform.system.get(NodeActor, name)
    record: NodeRecord = await ref.ask(message)
    log.info("node %s joined (region %s, advertised at %s)", name, record.region, record.advertise_url)
    return record


async def keep_alive(platform: NodeServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Renew this node's heartbeat every `HEARTBEAT_SECONDS` until cancelled. A beat
    that fails (the store away for a moment) is logged and the next one tried."""
    ref = await platform.system.get(NodeActor, platform.settings.node_name)
    task_status.started()
    while True:
        await trio.sleep(HEARTBEAT_SECONDS)
        try:
            await ref.ask(Heartbeat(await measure(platform)))
        except Exception:
            if platform.system.stopping:
                return  # the node stops: `leave` marks it so
            log.warning("this node's heartbeat could not be stored", exc_info=True)


async def leave(platform: NodeServices) -> None:
    """Mark this node stopped (lost at once); a store that cannot be reached is logged."""
    try:
        ref = await platform.system.get(NodeActor, platform.settings.node_name)
        await ref.ask(Leave())
    except Exception:
        log.warning("this node's leaving could not be stored: it is lost after its heartbeat goes stale", exc_info=True)


def public(record: NodeRecord, lost_since: str, resources: int) -> dict[str, Any]:
    """A node as `GET /admin/nodes` shows it (contract §20); `resources`: the live
    sandboxes, computers and database servers it hosts."""
    return {
        "name": record.name,
        "advertise_url": record.advertise_url,
        "advertise_preview_url": record.advertise_preview_url,
        "region": record.region,
        "state": store.seen_state(record, lost_since),
        "heartbeat_at": record.heartbeat_at,
        "started_at": record.started_at,
        "capacity": {"cores": record.cores, "memory_mb": record.memory_mb, "disk_free_gb": round(record.disk_free_mb / 1024, 1)},
        "load": {"instances": record.instances, "warm_pool": record.pooled, "memory_mb_used": record.memory_mb_used},
        "resources": resources,
        "room": {  # placement's limits on the node (docs/api.md "Placement"); 0: none
            "max_instances": record.max_instances, "max_memory_mb": record.max_memory_mb,
            "disk_reserve_gb": round(record.disk_reserve_mb / 1024, 1),
        },
        "templates": record.templates,
        "moving": record.moving,
    }


async def describe(db: Database) -> list[dict[str, Any]]:
    lost_since = store.lost_before()
    hosted = await store.hosted_counts(db)
    return [public(record, lost_since, hosted.get(record.name, 0)) for record in await store.all_nodes(db)]


async def drain(platform: NodeServices, name: str, move: str = "stopped") -> dict[str, Any]:
    """Mark `name` draining, moving what `move` says off it (404 `NODE_NOT_FOUND` for a
    name no node has)."""
    if await store.find(platform.db, name) is None:
        raise node_not_found()
    ref = await platform.system.get(NodeActor, name)
    record: NodeRecord = await ref.ask(Drain(move))
    return public(record, store.lost_before(), (await store.hosted_counts(platform.db)).get(name, 0))
