"""Background jobs that run every few seconds for the life of the platform.

One loop for all of them (auto-stop checks, metric samples, DNS re-checks): a
round that raises is logged and the job goes on at its next round, so one bad row
never stops a watcher for good.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("corral.actors.periodic")


async def run_periodically(
    job: Callable[[], Awaitable[Any]],
    interval: Callable[[], float],
    what: str,
    *,
    wait_first: bool = True,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run `job` every `interval()` seconds, first after one interval unless `wait_first`
    is False. `interval` is read each round, so a changed setting takes effect."""
    task_status.started()
    if wait_first:
        await trio.sleep(interval())
    while True:
        try:
            await job()
        except Exception:
            log.exception("%s failed; trying again in %s s", what, interval())
        await trio.sleep(interval())
