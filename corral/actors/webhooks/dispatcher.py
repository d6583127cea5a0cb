"""The dispatcher: turns bus events into queued deliveries for the tenant's webhooks.

It subscribes to the bus before anything else runs, then replays the retained event
log (15 minutes): an event that was logged but not yet queued when the last run
stopped (or crashed) is queued now. Queueing is idempotent (one row per webhook,
event and attempt), so replaying what was already queued changes nothing, and the
event id `evt_<log id>` is the same on every node. A subscriber that falls behind
is dropped by the bus; the dispatcher then re-subscribes and replays again.

A webhook receives the events published after it was created that its `events`
list names (all of the table's types when the list is empty).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import trio

from corral.actors.bus import SubscriberLagged, Subscription
from corral.storage import Event, Row, to_iso, utc_now

from . import queue
from .events import BUS_EVENT_TYPES, event_id_of, payload_of, subscribed

if TYPE_CHECKING:
    from corral.actors.webhooks.services import WebhookServices

log = logging.getLogger("corral.webhooks")

REPLAY_BATCH = 500


class Dispatcher:
    def __init__(self, platform: WebhookServices, wake_worker: Callable[[], None]) -> None:
        self.platform = platform
        self.db = platform.db
        self.wake_worker = wake_worker
        self.queued = 0

    def _subscribe(self) -> Subscription:
        return self.platform.bus.subscribe(lambda event: event.tenant_id is not None, types=BUS_EVENT_TYPES)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        subscription = self._subscribe()
        task_status.started()
        while True:
            try:
                with subscription:
                    try:
                        await self._replay()
                    except Exception:
                        log.exception("replaying the event log for webhooks failed")
                    async for event in subscription:
                        await self._dispatch_safely(event)
                return  # the bus closed: shutdown
            except SubscriberLagged:
                log.warning("the webhook dispatcher fell behind; replaying the event log")
                subscription = self._subscribe()

    async def _dispatch_safely(self, event: Event) -> None:
        try:
            await self.dispatch(event)
        except Exception:
            # The event is in the log: the next replay (restart or lag) queues it.
            log.exception("queueing webhook deliveries for event %s failed", event.id)

    async def dispatch(self, event: Event) -> int:
        """Queue `event` for every matching webhook of its tenant; returns how many were new."""
        if event.tenant_id is None or event.type not in BUS_EVENT_TYPES:
            return 0
        hooks = await self.db.fetch_all(
            "SELECT id, events FROM webhooks WHERE tenant_id = ? AND created_at <= ?",
            (event.tenant_id, event.created_at),
        )
        wanted = [hook for hook in hooks if subscribed(json.loads(hook["events"]), event.type)]
        if not wanted:
            return 0
        body = payload_of(event)
        rows = [
            queue.attempt_row(
                webhook_id=hook["id"],
                tenant_id=event.tenant_id,
                event_id=event_id_of(event),
                event_type=event.type,
                payload=body,
                attempt=1,
                scheduled_at=event.created_at,
            )
            for hook in wanted
        ]
        added = await queue.enqueue(self.db, rows)
        if added:
            self.queued += added
            self.wake_worker()
        return added

    async def _replay(self) -> None:
        """Queue every retained event of a webhook type (already queued ones are skipped)."""
        tenants = {row["tenant_id"] for row in await self.db.fetch_all("SELECT DISTINCT tenant_id FROM webhooks")}
        if not tenants:
            return
        cutoff = to_iso(utc_now() - timedelta(seconds=self.platform.events.retention_seconds))
        marks = ", ".join("?" for _ in BUS_EVENT_TYPES)
        after = ""
        while True:
            rows: list[Row] = await self.db.fetch_all(
                f"SELECT * FROM events WHERE created_at >= ? AND id > ? AND type IN ({marks})"
                " ORDER BY id LIMIT ?",
                (cutoff, after, *BUS_EVENT_TYPES, REPLAY_BATCH),
            )
            for row in rows:
                if row["tenant_id"] in tenants:
                    await self._dispatch_safely(_event(row))
            if len(rows) < REPLAY_BATCH:
                return
            after = rows[-1]["id"]


def _event(row: Row) -> Event:
    return Event(
        id=row["id"],
        type=row["type"],
        tenant_id=row["tenant_id"],
        resource_type=row["resource_type"],
        resource_id=row["resource_id"],
        data=json.loads(row["data"]),
        created_at=row["created_at"],
    )
