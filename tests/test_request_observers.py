"""The node's request observers get every answered request, in order, in batches: soon by
themselves, at once when a reader drains, and none is lost to a failing observer."""

from __future__ import annotations

import trio

from corral.request_observers import BATCH_SIZE, RequestObservers


async def test_records_reach_every_observer_in_order_by_themselves() -> None:
    observers = RequestObservers()
    first: list[int] = []
    second: list[int] = []
    observers.append(first.append)
    observers.append(second.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(observers.run)
        for number in range(5):
            observers.record(number)
        with trio.fail_after(10):  # handed over by the task, without a reader asking
            while len(second) < 5:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert first == second == [0, 1, 2, 3, 4]


def test_a_reader_drains_and_a_full_batch_goes_at_once() -> None:
    observers = RequestObservers()
    seen: list[int] = []
    observers.append(seen.append)
    observers.record(1)
    assert seen == []  # waiting for its batch
    observers.drain()
    assert seen == [1]
    for number in range(BATCH_SIZE):
        observers.record(number)
    assert seen == [1, *range(BATCH_SIZE)]  # no task ran: the full batch went by itself


def test_a_failing_observer_costs_the_others_nothing_and_removing_one_gives_it_its_due() -> None:
    observers = RequestObservers()
    seen: list[int] = []

    def broken(record: int) -> None:
        raise RuntimeError("observer bug")

    observers.append(broken)
    observers.append(seen.append)
    observers.record(1)
    observers.record(2)
    observers.drain()
    assert seen == [1, 2]
    observers.record(3)
    observers.remove(seen.append)  # it still sees what was answered while it watched
    observers.record(4)
    observers.drain()
    assert seen == [1, 2, 3] and seen.append not in observers and broken in observers


async def test_records_left_when_the_node_stops_are_handed_over() -> None:
    observers = RequestObservers()
    seen: list[int] = []
    observers.append(seen.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(observers.run)
        observers.record(7)
        nursery.cancel_scope.cancel()
    assert seen == [7]
