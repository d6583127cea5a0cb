"""The event bus: persist every event to the event log, then fan it out live.

Persisting first means a subscriber that reconnects (SSE `Last-Event-ID`, the
webhook dispatcher after a restart) can replay from the log anything it missed;
live fan-out is only the fast path. Publishing is serialised so subscribers see
events in log order.

Subscribers are bounded and never block publishers: one that falls `capacity`
events behind is dropped. Its iterator yields what it had buffered, then raises
`SubscriberLagged`; the consumer should re-subscribe and replay from the log after
the last id it saw.

With several nodes on one PostgreSQL store, the events other nodes publish come in
through `deliver` (`corral.storage.RemoteEvents` reads them from the shared log), and
`published_here` tells that listener which ids this node offered itself.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from types import TracebackType

import trio

from corral.storage import Event, EventLog

log = logging.getLogger("corral.actors.bus")

EventFilter = Callable[[Event], bool]


class SubscriberLagged(Exception):
    """The subscriber fell too far behind and was dropped; replay from the log."""

    def __init__(self, last_event_id: str | None) -> None:
        super().__init__("subscriber lagged behind and was dropped; replay from the event log")
        self.last_event_id = last_event_id


class Subscription:
    """A bounded live stream of matching events: `async for event in subscription`.

    Use it as a (sync or async) context manager, or call `close()`, to unsubscribe.
    """

    def __init__(self, bus: EventBus, matches: EventFilter, capacity: int) -> None:
        self._bus = bus
        self.matches = matches
        self.capacity = capacity
        self._send, self._receive = trio.open_memory_channel[Event](capacity)
        self.lagged = False
        self.closed = False
        self.last_event_id: str | None = None

    def offer(self, event: Event) -> None:
        """Called by the bus; never blocks: a full buffer drops the subscriber."""
        if self.closed:
            return
        try:
            wanted = self.matches(event)
        except Exception:  # a broken filter must not break the publisher
            log.exception("an event filter failed; skipping event %s", event.id)
            return
        if not wanted:
            return
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            log.warning("dropping a lagging event subscriber (%d buffered)", self.capacity)
            self.lagged = True
            self._bus.dropped += 1
            self.close()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.close()

    @property
    def pending(self) -> int:
        return self._send.statistics().current_buffer_used if not self.closed else 0

    async def receive(self) -> Event:
        """The next event; `trio.EndOfChannel` when closed, `SubscriberLagged` if dropped."""
        try:
            event = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self.lagged:
                raise SubscriberLagged(self.last_event_id) from None
            raise trio.EndOfChannel from None
        self.last_event_id = event.id
        return event

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._send.close()
            self._bus._subscriptions.discard(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def event_filter(
    *,
    tenant_id: str | None = None,
    resource_type: str | None = None,
    resource_id: str | None = None,
    types: Iterable[str] | None = None,
    where: EventFilter | None = None,
) -> EventFilter:
    """A filter on the given fields; a type ending in `.*` matches by prefix."""
    wanted = list(types) if types is not None else None

    def type_matches(event_type: str) -> bool:
        if wanted is None:
            return True
        return any(
            event_type.startswith(t[:-1]) if t.endswith(".*") else event_type == t for t in wanted
        )

    def matches(event: Event) -> bool:
        return (
            (tenant_id is None or event.tenant_id == tenant_id)
            and (resource_type is None or event.resource_type == resource_type)
            and (resource_id is None or event.resource_id == resource_id)
            and type_matches(event.type)
            and (where is None or where(event))
        )

    return matches


class EventBus:
    def __init__(
        self,
        event_log: EventLog,
        *,
        subscriber_capacity: int = 1024,
        prune_interval: float = 60.0,
    ) -> None:
        self.event_log = event_log
        self.subscriber_capacity = subscriber_capacity
        self.prune_interval = prune_interval
        self._subscriptions: set[Subscription] = set()
        self._lock = trio.Lock()
        self.published = 0
        self.received = 0
        """Events other nodes published, offered here through `deliver`."""
        self.dropped = 0
        """Subscribers dropped for lagging a full buffer behind."""
        self.published_here: Callable[[str], None] | None = None
        """Told each id this node offers (several nodes only: None on a one-node store)."""

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    def backlog(self) -> list[int]:
        """Events offered to each subscriber and not yet taken: the fan-out lag the metrics show."""
        return [subscription.pending for subscription in self._subscriptions]

    async def publish(self, event: Event) -> Event:
        """Append `event` to the log, then offer it to every subscriber; returns it."""
        if self.event_log.queues_appends:
            # The append only queues the row (`Database.later`): nothing here can
            # suspend, so events reach the log and the subscribers in this order
            # without the lock (whose checkpoints cost more than the rest).
            await self.event_log.append(event)
            self._offer(event)
            return event
        async with self._lock:
            await self.event_log.append(event)
            self._offer(event)
        return event

    def _offer(self, event: Event) -> None:
        self.published += 1
        if self.published_here is not None:
            self.published_here(event.id)
        for subscription in list(self._subscriptions):
            subscription.offer(event)

    def deliver(self, event: Event) -> None:
        """Offer an event another node published (already in the shared log) to this
        node's subscribers."""
        self.received += 1
        for subscription in list(self._subscriptions):
            subscription.offer(event)

    async def announce(self, event: Event) -> Event:
        """Offer `event` to live subscribers without writing it to the event log: for a
        part that keeps the event durable in its own table (agent runs), so a second
        write would only cost time. Replay is then that part's, from its table."""
        async with self._lock:
            self._offer(event)
        return event

    def subscribe(
        self,
        matches: EventFilter | None = None,
        *,
        tenant_id: str | None = None,
        resource_type: str | None = None,
        resource_id: str | None = None,
        types: Iterable[str] | None = None,
        capacity: int | None = None,
    ) -> Subscription:
        """Subscribe to live events that pass `matches` and the given fields."""
        by_fields = event_filter(
            tenant_id=tenant_id,
            resource_type=resource_type,
            resource_id=resource_id,
            types=types,
            where=matches,
        )
        subscription = Subscription(self, by_fields, capacity or self.subscriber_capacity)
        self._subscriptions.add(subscription)
        return subscription

    async def follow(
        self,
        on_event: Callable[[Event], None],
        on_lag: Callable[[], None],
        *,
        resource_type: str | None = None,
        types: Iterable[str] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call `on_event` with each matching live event, until cancelled; started once
        subscribed. A follower dropped for lagging gets `on_lag()` (it should read
        everything anew) and is subscribed again: for caches that follow the events."""
        started = False
        while True:
            with self.subscribe(resource_type=resource_type, types=types) as events:
                if not started:
                    task_status.started()
                    started = True
                try:
                    async for event in events:
                        on_event(event)
                except SubscriberLagged:
                    on_lag()

    def close(self) -> None:
        """End every subscription (their iterators finish): used at shutdown."""
        for subscription in list(self._subscriptions):
            subscription.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prune the event log every `prune_interval` seconds (15-minute retention)."""
        task_status.started()
        if math.isinf(self.prune_interval):
            await trio.sleep_forever()
        while True:
            try:
                removed = await self.event_log.prune()
                if removed:
                    log.debug("pruned %d events", removed)
            except Exception:
                log.exception("pruning the event log failed")
            await trio.sleep(self.prune_interval)
