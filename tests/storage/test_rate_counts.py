"""Rate-limit counts the nodes add up (`corral.storage.rate_counts`), on a real store of
each kind: two `SharedRateCounts` on two connections to one database stand for two nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from corral.storage import Database, SharedRateCounts, migrate, open_database
from corral.storage.rate_counts import NODE_SECONDS

WINDOW = 1_800_000_000  # a minute's start, in Unix seconds
NOW = WINDOW + 5.0


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[Database, Database]]:
    first = open_database(database_url)
    await migrate(first)
    second = open_database(database_url) if first.dialect == "postgresql" else first
    try:
        yield first, second
    finally:
        if second is not first:
            await second.close()
        await first.close()


async def test_each_batch_adds_its_counts_and_answers_the_global_totals(stores: tuple[Database, Database]) -> None:
    a, b = SharedRateCounts(stores[0], "node-a"), SharedRateCounts(stores[1], "node-b")
    first = await a.add({("key:k1", WINDOW): (30, 100), ("ip:1.2.3.4", WINDOW): (2, 600)}, WINDOW, NOW)
    assert first.totals == {("key:k1", WINDOW): 30, ("ip:1.2.3.4", WINDOW): 2}
    assert first.hot == {} and first.nodes == 1
    second = await b.add({("key:k1", WINDOW): (25, 100)}, WINDOW, NOW + 0.1)
    assert second.totals == {("key:k1", WINDOW): 55}  # both nodes' hits
    assert second.hot == {("key:k1", WINDOW): 55} and second.nodes == 2  # at half its limit: every node hears of it
    idle = await a.add({}, WINDOW, NOW + 0.2)  # a node with nothing to add still learns
    assert (idle.totals, idle.hot, idle.nodes) == ({}, {("key:k1", WINDOW): 55}, 2)


async def test_a_node_silent_for_a_while_no_longer_takes_a_share(stores: tuple[Database, Database]) -> None:
    a, b = SharedRateCounts(stores[0], "node-a"), SharedRateCounts(stores[1], "node-b")
    await a.add({}, WINDOW, NOW)
    assert (await b.add({}, WINDOW, NOW + 0.5)).nodes == 2
    assert (await b.add({}, WINDOW, NOW + NODE_SECONDS + 0.5)).nodes == 1


async def test_the_first_batch_of_a_window_deletes_the_windows_before_the_last(stores: tuple[Database, Database]) -> None:
    db = stores[0]
    counts = SharedRateCounts(db, "node-a")
    for minute in range(3):
        await counts.add({("key:k1", WINDOW + 60 * minute): (1, 100)}, WINDOW + 60 * minute, NOW + 60 * minute)
    windows = [row["window_start"] for row in await db.fetch_all("SELECT window_start FROM rate_counts ORDER BY window_start")]
    assert windows == [WINDOW + 60, WINDOW + 120]  # the current window and the one before


async def test_two_nodes_adding_at_once_lose_no_count(stores: tuple[Database, Database]) -> None:
    """Batches of the same buckets from two nodes at the same moment (row locks taken in
    one order: no deadlock) add up exactly."""
    nodes = [SharedRateCounts(stores[0], "node-a"), SharedRateCounts(stores[1], "node-b")]
    buckets = [f"key:k{i}" for i in range(50)]

    async def send(counts: SharedRateCounts, order: list[str]) -> None:
        for _ in range(10):
            await counts.add({(bucket, WINDOW): (1, 1000) for bucket in order}, WINDOW, NOW)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, nodes[0], buckets)
        nursery.start_soon(send, nodes[1], buckets[::-1])
    totals = await stores[0].fetch_all("SELECT hits FROM rate_counts WHERE window_start = ?", (WINDOW,))
    assert [row["hits"] for row in totals] == [20] * 50
