"""The event bus: persisted first, fanned out, slow subscribers isolated."""

from __future__ import annotations

import pytest
import trio

from corral.actors import EventBus, SubscriberLagged, Subscription
from corral.storage import Database, Event, EventLog


async def test_publish_persists_then_fans_out_to_matching_subscribers(db: Database) -> None:
    bus = EventBus(EventLog(db))
    everything = bus.subscribe()
    one_sandbox = bus.subscribe(resource_type="sandbox", resource_id="s1")
    exec_events = bus.subscribe(types=["sandbox.exec.*"], tenant_id="t1")
    published = [
        await bus.publish(Event("sandbox.started", "sandbox", "s1", {}, tenant_id="t1")),
        await bus.publish(
            Event("sandbox.exec.completed", "sandbox", "s2", {"x": 1}, tenant_id="t1")
        ),
        await bus.publish(Event("sandbox.exec.completed", "sandbox", "s1", {}, tenant_id="t2")),
    ]
    assert [e.id for e in await EventLog(db).list("sandbox", "s1")] == [
        published[0].id,
        published[2].id,
    ]

    async def drain(subscription: Subscription) -> list[str]:
        got = []
        while subscription.pending:
            got.append((await subscription.receive()).id)
        return got

    assert await drain(everything) == [e.id for e in published]
    assert await drain(one_sandbox) == [published[0].id, published[2].id]
    assert await drain(exec_events) == [published[1].id]
    assert bus.subscribers == 3
    one_sandbox.close()
    assert bus.subscribers == 2


async def test_a_slow_subscriber_is_dropped_without_blocking_others(db: Database) -> None:
    bus = EventBus(EventLog(db))
    slow = bus.subscribe(capacity=2)
    fast_seen: list[str] = []

    async def fast_reader() -> None:
        async for event in bus.subscribe(capacity=2):
            fast_seen.append(event.id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fast_reader)
        published = []
        with trio.fail_after(5):  # publishers never wait for the slow subscriber
            for i in range(6):
                published.append(await bus.publish(Event(f"e{i}", "sandbox", "s1", {})))
                await trio.testing.wait_all_tasks_blocked()
        bus.close()
    assert fast_seen == [e.id for e in published]
    assert slow.lagged and bus.subscribers == 0
    received = [(await slow.receive()).id, (await slow.receive()).id]
    assert received == [published[0].id, published[1].id]
    with pytest.raises(SubscriberLagged) as lagged:
        await slow.receive()
    # the consumer replays from the log after the last id it saw
    assert lagged.value.last_event_id == published[1].id
    replay = await EventLog(db).list("sandbox", "s1", after=lagged.value.last_event_id)
    assert [e.id for e in replay] == [e.id for e in published[2:]]


async def test_the_pruner_runs_in_the_background(db: Database) -> None:
    log = EventLog(db, retention_seconds=0)
    bus = EventBus(log, prune_interval=0.05)
    await bus.publish(Event("old", "sandbox", "s1", {}))
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        with trio.fail_after(5):
            while await db.fetch_value("SELECT COUNT(*) AS n FROM events"):
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
