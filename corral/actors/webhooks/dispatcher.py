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

import logging
from collections.abc import Callable

import trio

from corral.actors.bus import EventBus, SubscriberLagged, Subscription
from corral.storage import Database, Event, EventLog

from . import store
from .events import BUS_EVENT_TYPES, event_id_of, payload_of, subscribed

log = logging.getLogger("corral.webhooks")

REPLAY_BATCH = 500


class Dispatcher:
    def __init__(self, db: Database, bus: EventBus, events: EventLog, wake_worker: Callable[[], None]) -> None:
        self.db = db
        self.bus = bus
        self.events = events
        self.wake_worker = wake_worker
        self.queued = 0

    def _subscribe(self) -> Subscription:
        return self.bus.subscribe(lambda event: event.tenant_id is not None, types=BUS_EVENT_TYPES)

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
        hooks = await store.subscribers(self.db, event.tenant_id, created_by_then=event.created_at)
        wanted = [hook for hook in hooks if subscribed(hook.events, event.type)]
        if not wanted:
            return 0
        body = payload_of(event)
        attempts = [
            store.new_attempt(
                webhook_id=hook.id,
                tenant_id=event.tenant_id,
                event_id=event_id_of(event),
                event_type=event.type,
                payload=body,
                attempt=1,
                scheduled_at=event.created_at,
            )
            for hook in wanted
        ]
        added = await store.enqueue(self.db, attempts)
        if added:
            self.queued += added
            self.wake_worker()
        return added

    async def _replay(self) -> None:
        """Queue every retained event of a webhook type (already queued ones are skipped)."""
        tenants = await store.tenants_with_webhooks(self.db)
        if not tenants:
            return
        after = ""
        while True:
            events = await self.events.of_types(BUS_EVENT_TYPES, after=after, limit=REPLAY_BATCH)
            for event in events:
                if event.tenant_id in tenants:
                    await self._dispatch_safely(event)
            if len(events) < REPLAY_BATCH:
                return
            after = events[-1].id
