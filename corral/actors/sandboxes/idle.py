"""Auto-stop: suspend sandboxes idle for longer than their `auto_stop` seconds.

Activity is the sandbox's `last_activity_at`, written by exec, files, process start
and output, and preview traffic (`touch`). An idle sandbox first emits
`sandbox.idle {sandbox_id, last_activity_at}`, then is suspended through its actor
(processes halted, files kept), which emits `sandbox.suspended`; `start` resumes
it. The check is one indexed query every `idle_check_seconds`, on every node: the
actor's transition table makes a second suspension of the same sandbox a refusal,
not a double stop.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import trio

from corral.actors.periodic import run_periodically
from corral.actors.platform import Platform
from corral.errors import ApiError
from corral.storage import Event, Row, parse_iso, utc_now

from .actor import SandboxActor
from .messages import Suspend

log = logging.getLogger("corral.sandboxes.idle")


async def idle_sandboxes(platform: Platform) -> list[Row]:
    """Running sandboxes with auto-stop whose last activity is older than their limit."""
    rows = await platform.db.fetch_all(
        "SELECT id, tenant_id, auto_stop, last_activity_at, created_at FROM sandboxes"
        " WHERE status = 'running' AND auto_stop IS NOT NULL AND auto_stop > 0"
    )
    now = utc_now()
    return [
        row
        for row in rows
        if now - parse_iso(row["last_activity_at"] or row["created_at"]) >= timedelta(seconds=int(row["auto_stop"]))
    ]


async def suspend_idle(platform: Platform, row: Row) -> bool:
    """Emit `sandbox.idle` and suspend one sandbox; False when it was no longer running."""
    await platform.bus.publish(
        Event(
            "sandbox.idle",
            "sandbox",
            row["id"],
            {"sandbox_id": row["id"], "last_activity_at": row["last_activity_at"]},
            tenant_id=row["tenant_id"],
        )
    )
    ref = await platform.system.get(SandboxActor, row["id"])
    try:
        await ref.ask(Suspend(), timeout=120)
    except ApiError as exc:
        log.info("sandbox %s was not suspended: %s", row["id"], exc.message)
        return False
    await platform.agents.forget(row["id"])
    return True


async def suspend_idle_sandboxes(platform: Platform) -> None:
    """One auto-stop round."""
    for row in await idle_sandboxes(platform):
        if await still_idle(platform, row):
            await suspend_idle(platform, row)


async def watch_idle(platform: Platform, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    await run_periodically(
        lambda: suspend_idle_sandboxes(platform),
        lambda: platform.settings.idle_check_seconds,
        "the sandbox idle check",
        task_status=task_status,
    )


async def still_idle(platform: Platform, row: Row) -> bool:
    """Re-read just before suspending: activity may have arrived since the scan."""
    fresh = await platform.db.fetch_one(
        "SELECT status, last_activity_at FROM sandboxes WHERE id = ?", (row["id"],)
    )
    return fresh is not None and fresh["status"] == "running" and fresh["last_activity_at"] == row["last_activity_at"]
