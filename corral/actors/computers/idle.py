"""Auto-stop: stop computers idle for `auto_stop` seconds (0 disables).

Activity is the computer's `last_activity_at`: written by exec, exec/python, the
files API, the apps list, start, restart and a change of the auto-stop setting; a
command still running counts as activity however long it takes. The watcher runs
every `idle_check_seconds` and sends an idle computer `IdleStop`, whose handler
re-reads `last_activity_at` (activity may have arrived since the scan), emits
`computer.idle {computer_id, idle_seconds}` and stops it with reason `idle`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.storage import parse_iso, utc_now

from .actor import ComputerActor
from .execution import activity
from .messages import IdleStop

if TYPE_CHECKING:
    from corral.actors.platform import Platform

log = logging.getLogger("corral.computers.idle")


async def stop_idle_computers(platform: Platform) -> int:
    """One scan: stop every running computer idle past its auto-stop; returns how many stopped."""
    rows = await platform.db.fetch_all(
        "SELECT id, auto_stop, last_activity_at FROM computers WHERE status = 'running' AND auto_stop > 0"
    )
    now = utc_now()
    tracker = activity(platform)
    stopped = 0
    for row in rows:
        idle = int((now - parse_iso(row["last_activity_at"])).total_seconds())
        if idle < int(row["auto_stop"]) or tracker.is_busy(row["id"]):
            continue
        ref = await platform.system.get(ComputerActor, row["id"])
        try:
            await ref.ask(IdleStop(idle, row["last_activity_at"]), timeout=120)
        except ApiError as exc:
            log.info("computer %s was not stopped as idle: %s", row["id"], exc.message)
            continue
        stopped += 1
    return stopped


async def watch_idle(platform: Platform, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    await run_periodically(
        lambda: stop_idle_computers(platform),
        lambda: platform.settings.idle_check_seconds,
        "the computer idle check",
        task_status=task_status,
    )
