"""Events of other processes heard through LISTEN/NOTIFY (`corral.storage.remote_events`),
on a real PostgreSQL: two stores on one database stand for two nodes."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import trio

from corral.ids import new_ulid
from corral.storage import Database, Event, EventLog, RemoteEvents, migrate, open_database
from corral.storage.remote_events import ulid_floor
from tests.pg_server import create_database
from tests.support import free_port

_names = itertools.count()


@dataclass
class Node:
    db: Database
    events: EventLog
    heard: list[Event] = field(default_factory=list)

    async def publish(self, remote: RemoteEvents | None, count: int, what: str) -> list[Event]:
        """`count` events appended to this node's log (and, as the bus does, told to its listener)."""
        made = []
        for i in range(count):
            event = Event(f"sandbox.{what}", "sandbox", "sbx1", {"i": i}, tenant_id="t1")
            await self.events.append(event)
            if remote is not None:
                remote.published_here(event.id)
            made.append(event)
        return made


@pytest.fixture
async def two_nodes(postgres_url: str) -> AsyncIterator[tuple[Node, Node]]:
    url = create_database(postgres_url, f"remote_events_{next(_names)}")
    a, b = open_database(url), open_database(url)
    await migrate(a)
    try:
        yield Node(a, EventLog(a)), Node(b, EventLog(b))
    finally:
        await a.close()
        await b.close()


async def heard(node: Node, count: int, seconds: float = 10) -> list[Event]:
    with trio.fail_after(seconds):
        while len(node.heard) < count:
            await trio.sleep(0.005)
    await trio.sleep(0.2)  # and nothing more comes
    return node.heard


def test_a_ulid_floor_sorts_before_every_id_of_its_millisecond_and_after_earlier_ones() -> None:
    before = ulid_floor(time.time() - 0.01)
    made = new_ulid()
    after = ulid_floor(time.time() + 0.01)
    assert len(before) == 10 and before < made < after


async def test_a_node_hears_the_other_nodes_events_in_order_once_and_not_its_own(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    listener = RemoteEvents(b.events, b.heard.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await nursery.start(a.db.later.run)  # A's rows go through its write-behind queue, as on a node
        sent = await a.publish(None, 300, "exec.started")
        await b.publish(listener, 5, "own")  # B's own: its bus offered them already
        got = await heard(b, 300)
        assert [event.id for event in got] == [event.id for event in sent]
        assert got[0] == sent[0]  # the whole event, read from the log
        assert listener.delivered == 300 and listener.caught_up == 0 and listener.reconnects == 0
        nursery.cancel_scope.cancel()


async def test_a_lost_listen_connection_reconnects_and_catches_up_from_the_log_once(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    listener = RemoteEvents(b.events, b.heard.append, retry_seconds=(0.5,))
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        before = await a.publish(None, 20, "before")
        await heard(b, 20)
        first_pid = listener.backend_pid
        killed = await a.db.fetch_value("SELECT pg_terminate_backend(?) AS killed", (first_pid,))
        assert killed
        with trio.fail_after(5):  # noticed at once ...
            while listener.connected.is_set():
                await trio.sleep(0.005)
        during = await a.publish(None, 30, "during")  # ... and these are missed live
        own = await b.publish(listener, 10, "own")  # published on B meanwhile: never delivered by B's listener
        with trio.fail_after(10):
            await listener.connected.wait()
        after = await a.publish(None, 10, "after")
        got = await heard(b, 60)
        assert listener.backend_pid != first_pid and listener.reconnects == 1
        assert [event.id for event in got] == [event.id for event in before + during + after]
        # Every missed one came from the log; one of the later ones may too, when it
        # committed before the catch-up read that follows the new LISTEN. Once each.
        assert 30 <= listener.caught_up <= 40 and listener.delivered == 60
        assert not {event.id for event in own} & {event.id for event in got}
        nursery.cancel_scope.cancel()


async def test_a_listener_that_cannot_connect_keeps_trying_and_then_hears(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    url = b.db.url
    port = url.rsplit("@", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    listener = RemoteEvents(b.events, b.heard.append, url=url.replace(f":{port}/", f":{free_port()}/"), retry_seconds=(0.05,))
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)  # started even so: the node does not wait for it
        await trio.sleep(0.3)
        assert not listener.connected.is_set()
        listener.url = url  # the store answers again
        with trio.fail_after(10):
            await listener.connected.wait()
        sent = await a.publish(None, 3, "late")
        assert [event.id for event in await heard(b, 3)] == [event.id for event in sent]
        nursery.cancel_scope.cancel()
