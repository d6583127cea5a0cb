"""`GET /databases/{id}/metrics`: `pg_stat_database` for connections, size and
transactions per second; the cgroup samples the watcher takes for CPU and memory."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import trio

from corral.vm import InstanceState

from .store import DatabaseRecord

if TYPE_CHECKING:
    from .services import DatabaseServices

TPS_WINDOW = 1.0
_last: dict[str, tuple[float, int]] = {}


def _dir_size(path: Any) -> int:
    total = 0
    for item in path.rglob("*"):
        try:
            if item.is_file():
                total += item.stat().st_size
        except OSError:
            pass
    return total


async def database_metrics(platform: DatabaseServices, row: DatabaseRecord) -> dict[str, Any]:
    node = platform.databases
    samples = list(node.samples.get(row.id, ()))
    result: dict[str, Any] = {
        "connections": 0,
        "size_bytes": 0,
        "transactions_per_second": 0.0,
        "cpu_percent": [{"ts": s["ts"], "value": s["cpu"]} for s in samples if s["cpu"] is not None],
        "memory_percent": [{"ts": s["ts"], "value": s["memory"]} for s in samples],
    }
    info = await node.driver.info(row.id)
    if info.state is not InstanceState.RUNNING:
        result["size_bytes"] = await trio.to_thread.run_sync(_dir_size, node.driver.layout.data(row.id))
        return result
    stats = await node.driver.database_stats(row.id, row.pg_database)
    now = time.monotonic()
    previous = _last.get(row.id)
    if previous is None or now - previous[0] > 60:
        await trio.sleep(TPS_WINDOW)
        first = stats
        stats = await node.driver.database_stats(row.id, row.pg_database)
        previous = (now, first["transactions"])
        now = time.monotonic()
    _last[row.id] = (now, stats["transactions"])
    elapsed = max(now - previous[0], 1e-3)
    result.update(
        connections=stats["connections"],
        size_bytes=stats["size_bytes"],
        transactions_per_second=round(max(0, stats["transactions"] - previous[1]) / elapsed, 2),
    )
    return result
