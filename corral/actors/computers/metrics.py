"""Computer metrics: a background sampler reads each running computer's cgroups; the
metrics endpoint reads the samples back by window.

- `cpu_percent`: CPU time used since the previous sample over the wall time between
  them, as a share of the computer's vCPUs (100 = every vCPU busy).
- `memory_percent`: the working set (usage minus reclaimable inactive file cache) as
  a share of the computer's memory limit.

Samples are taken every `computer_metrics_seconds` and kept seven days. The `1h`
window answers every sample; `24h` averages them into 5-minute points and `7d` into
hourly points, so every window is a few hundred points at most.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import trio

from corral.actors import billing
from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.storage import Row, parse_iso, to_iso, utc_now
from corral.vm import SIZES, InstanceNotFound

from . import store
from .store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

log = logging.getLogger("corral.computers.metrics")

RETENTION = timedelta(days=7)


@dataclass(frozen=True)
class Window:
    span: timedelta
    bucket_seconds: int | None


WINDOWS: dict[str, Window] = {
    "1h": Window(timedelta(hours=1), None),
    "24h": Window(timedelta(hours=24), 300),
    "7d": Window(timedelta(days=7), 3600),
}


@dataclass(frozen=True)
class Reading:
    cpu_ns: int
    at_ns: int


class Sampler:
    """Samples every running computer; remembers the last CPU reading of each."""

    def __init__(self, platform: ComputerServices) -> None:
        self.platform = platform
        self.last: dict[str, Reading] = {}
        self.rounds = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await run_periodically(
            self.round,
            lambda: self.platform.settings.computer_metrics_seconds,
            "sampling computer metrics",
            wait_first=False,
            task_status=task_status,
        )

    async def round(self) -> None:
        """One sample of every computer; old samples are pruned every 100 rounds."""
        self.rounds += 1
        await self.sample()
        if self.rounds % 100 == 1:
            await self.prune()

    async def sample(self) -> int:
        """One sample of every running computer; returns how many were written."""
        rows = await store.running(self.platform.db)
        running = {row.id for row in rows}
        for gone in set(self.last) - running:
            del self.last[gone]
        if not rows:
            return 0
        driver = await self.platform.runtime.driver()
        written = 0
        for row in rows:
            try:
                usage = await driver.metrics(row.instance_id)
            except InstanceNotFound:
                continue
            if await self._record(row, usage):
                written += 1
        return written

    async def _record(self, row: ComputerRecord, usage: dict[str, int]) -> bool:
        limits = SIZES[row.size]
        now = Reading(int(usage.get("cpu_ns", 0)), time.monotonic_ns())
        previous = self.last.get(row.id)
        self.last[row.id] = now
        if previous is None or now.cpu_ns < previous.cpu_ns or now.at_ns <= previous.at_ns:
            return False  # the first reading, or the instance restarted (new cgroups)
        cpu = 100.0 * (now.cpu_ns - previous.cpu_ns) / ((now.at_ns - previous.at_ns) * limits.vcpus)
        working_set = usage.get("memory_working_set_bytes", usage.get("memory_bytes", 0))
        memory = 100.0 * working_set / (limits.memory_mb * 1024 * 1024)
        await self.platform.db.execute(
            "INSERT INTO computer_metrics (computer_id, ts, cpu_percent, memory_percent) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (computer_id, ts) DO NOTHING",
            (row.id, to_iso(utc_now()), round(min(max(cpu, 0.0), 100.0), 2), round(min(max(memory, 0.0), 100.0), 2)),
        )
        return True

    async def prune(self) -> int:
        return await self.platform.db.execute(
            "DELETE FROM computer_metrics WHERE ts < ?", (to_iso(utc_now() - RETENTION),)
        )


def parse_window(value: str | None) -> Window:
    if value is None or value == "":
        return WINDOWS["1h"]
    if value not in WINDOWS:
        raise ApiError(400, "INVALID_PARAM", f"window must be one of {', '.join(WINDOWS)}")
    return WINDOWS[value]


def _bucketed(samples: list[Row], column: str, bucket_seconds: int | None) -> list[dict[str, Any]]:
    if bucket_seconds is None:
        return [{"ts": s["ts"], "value": float(s[column])} for s in samples]
    buckets: dict[int, list[float]] = {}
    for sample in samples:
        epoch = int(parse_iso(sample["ts"]).timestamp())
        buckets.setdefault(epoch - epoch % bucket_seconds, []).append(float(sample[column]))
    return [
        {"ts": to_iso(datetime.fromtimestamp(start, UTC)), "value": round(sum(values) / len(values), 2)}
        for start, values in sorted(buckets.items())
    ]


async def computer_metrics(platform: ComputerServices, row: ComputerRecord, window_name: str | None) -> dict[str, Any]:
    """`{cpu_percent: [{ts, value}], memory_percent: [{ts, value}], credits_per_hour}`."""
    window = parse_window(window_name)
    since = to_iso(utc_now() - window.span)
    samples = await platform.db.fetch_all(
        "SELECT ts, cpu_percent, memory_percent FROM computer_metrics WHERE computer_id = ? AND ts >= ? ORDER BY ts",
        (row.id, since),
    )
    return {
        "cpu_percent": _bucketed(samples, "cpu_percent", window.bucket_seconds),
        "memory_percent": _bucketed(samples, "memory_percent", window.bucket_seconds),
        "credits_per_hour": billing.hourly_credits(row.size),
    }


async def start_sampler(platform: ComputerServices) -> Sampler:
    sampler = Sampler(platform)
    platform.computer_metrics = sampler
    await platform.nursery.start(sampler.run)
    return sampler
