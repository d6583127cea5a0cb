"""Auto-stop for every instance kind: one watcher, one query per kind and round.

A resource is idle when it runs, has a positive `auto_stop` (seconds), and its
`last_activity_at` (or, before any activity, `created_at`) is older than that.
The watcher sends the kind's idle message (`IdleStop`, `Suspend`, ...) carrying
what it saw; the actor re-reads `last_activity_at` before acting, because activity
may have arrived since the scan, and emits `<kind>.idle` itself. Every node runs the
watcher over the resources it hosts (their `node`, issue 30: another node's actor is not
activated here); the actor's transition table makes a second stop of the same resource
a refusal, not a double stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from corral.actors.messages import Message
from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.storage import Database, parse_iso, sql_identifier, utc_now

log = logging.getLogger("corral.instances.idle")


class Refs(Protocol):
    """What the watcher needs of the actor system."""

    async def get(self, actor_class: type, actor_id: str) -> Any: ...


@dataclass(frozen=True)
class IdleWatch:
    """One kind's auto-stop: where its rows are and what an idle one is sent."""

    table: str
    actor: type
    message: Callable[[int, str], Message]
    """`(idle_seconds, last_activity_at)` -> the message that stops it."""
    is_busy: Callable[[str], bool] = lambda resource_id: False
    """A resource doing something that writes no activity yet (a long exec) is not idle."""


async def stop_idle(db: Database, refs: Refs, watch: IdleWatch, node: str | None = None) -> int:
    """One round for one kind (with `node`: of the resources that node hosts); returns
    how many were stopped."""
    await db.later.flush()  # activity is written behind the requests that made it
    hosted = "" if node is None else " AND (node IS NULL OR node = ?)"
    rows = await db.fetch_all(
        f"SELECT id, auto_stop, last_activity_at, created_at FROM {sql_identifier(watch.table)}"
        f" WHERE status = 'running' AND auto_stop IS NOT NULL AND auto_stop > 0{hosted}",
        () if node is None else (node,),
    )
    now = utc_now()
    stopped = 0
    for row in rows:
        seen = row["last_activity_at"] or row["created_at"]
        idle = int((now - parse_iso(seen)).total_seconds())
        if idle < int(row["auto_stop"]) or watch.is_busy(row["id"]):
            continue
        ref = await refs.get(watch.actor, row["id"])
        try:
            await ref.ask(watch.message(idle, row["last_activity_at"]), timeout=120)
        except ApiError as exc:
            log.info("%s %s was not stopped as idle: %s", watch.table, row["id"], exc.message)
            continue
        stopped += 1
    return stopped


async def watch_idle(
    db: Database,
    refs: Refs,
    watches: Sequence[IdleWatch],
    interval: Callable[[], float],
    *,
    node: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Every `interval()` seconds, one round for each kind (of `node`'s resources)."""

    async def round_() -> None:
        for watch in watches:
            await stop_idle(db, refs, watch, node)

    await run_periodically(round_, interval, "the idle check", task_status=task_status)
