"""The node's live picture for operators (`GET /api/v1/admin/node`, the console's
operator page, `corral admin top`): capacity, load, actors, warm pool.

The HTTP layer may not reach the runtime itself (`.importlinter`), so what the node
runs is read here, in the actors layer, without starting anything: a node that never
ran an instance reports none instead of building its runtime to count them. Every
figure is cheap to compute, because the operator page asks every two seconds.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corral.actors.runtime import RuntimeHolder, memory_available_mb, memory_total_mb
from corral.actors.system import ActorSystem
from corral.config import Settings
from corral.storage import Database

if TYPE_CHECKING:  # a type only: the sandboxes package's create gate reads the nodes package, which reads this
    from corral.actors.sandboxes.warm_pool import WarmPool

GIB = 1024**3

INSTANCE_TABLES = {"sandbox": "sandboxes", "computer": "computers", "database": "databases"}
"""Instance kinds whose records carry a `status`, and their tables."""


class NodeSources(Protocol):
    """What the picture is read from (the node's `Platform` is one)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def system(self) -> ActorSystem: ...

    @property
    def runtime(self) -> RuntimeHolder: ...

    @property
    def warm_pool(self) -> WarmPool | None: ...


def data_disk(settings: Settings) -> tuple[int, int] | None:
    """(total, free) bytes of the file system of the data directory; None if unknown."""
    data_dir = Path(settings.data_dir)
    try:
        disk = shutil.disk_usage(data_dir if data_dir.exists() else data_dir.parent)
    except OSError:
        return None
    return disk.total, disk.free


async def running_instances(runtime: RuntimeHolder) -> int:
    """Instances this node's runtime runs now, warm pool included; 0 before the runtime
    made its first (it is not started to count them)."""
    driver = runtime.started_driver
    if driver is None:
        return 0
    return sum(1 for info in await driver.instances() if info.address is not None)


def capacity(settings: Settings) -> dict[str, Any]:
    """Cores, memory (MiB) and the data directory's disk (GiB) of this node."""
    disk = data_disk(settings)
    return {
        "cpu_cores": os.cpu_count() or 1,
        "memory_total_mb": memory_total_mb(),
        "memory_available_mb": memory_available_mb(),
        "disk_total_gb": round(disk[0] / GIB, 2) if disk else None,
        "disk_free_gb": round(disk[1] / GIB, 2) if disk else None,
        "disk_reserve_gb": settings.disk_reserve_gb,
    }


async def instance_load(sources: NodeSources) -> dict[str, Any]:
    """Instances this node's runtime runs now (warm pool included), and instance
    records by kind and status (the store's: the same on every node of a cluster)."""
    running = await running_instances(sources.runtime)
    by_kind: dict[str, dict[str, int]] = {}
    for kind, table in INSTANCE_TABLES.items():
        rows = await sources.db.fetch_all(f"SELECT status, COUNT(*) AS n FROM {table} GROUP BY status")
        by_kind[kind] = {str(row["status"]): int(row["n"]) for row in rows}
    try:
        load_average: list[float] | None = [round(value, 2) for value in os.getloadavg()]
    except OSError:
        load_average = None
    return {"instances_running": running, "instances_by_kind": by_kind, "load_average": load_average}


def actor_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over `ActorSystem.introspect()`'s rows: how many actors of each kind and
    state, the mailboxes' backlog, restarts and crashes."""
    live = [row for row in rows if row.get("status") != "failed"]
    return {
        "live": len(live),
        "failed": len(rows) - len(live),
        "busy": sum(1 for row in live if row.get("busy")),
        "by_kind": dict(sorted(Counter(str(row["kind"]) for row in live).items())),
        "by_state": dict(sorted(Counter(str(row.get("state") or row.get("status")) for row in live).items())),
        "mailbox_depth": sum(int(row.get("mailbox_depth") or 0) for row in rows),
        "max_mailbox_depth": max((int(row.get("mailbox_depth") or 0) for row in rows), default=0),
        "restarts": sum(int(row.get("restarts") or 0) for row in rows),
        "recent_crashes": sum(int(row.get("recent_crashes") or 0) for row in rows),
    }


def warm_pool_summary(pool: WarmPool | None, settings: Settings) -> dict[str, Any] | None:
    """The pool's ready instances (every template and size) and the default sandbox's
    figures; None when the node keeps no pool."""
    if pool is None:
        return None
    return {"target": settings.warm_pool, "ready_total": len(pool.pooled_ids()), "default_small": asdict(pool.stats())}


async def describe_node(sources: NodeSources) -> dict[str, Any]:
    """The picture, JSON-ready (the request rate is the HTTP layer's to add)."""
    return {
        "node": {"name": sources.settings.node_name},
        "capacity": capacity(sources.settings),
        "load": await instance_load(sources),
        "actors": actor_summary(sources.system.introspect()),
        "warm_pool": warm_pool_summary(sources.warm_pool, sources.settings),
    }
