"""ULIDs: 26 Crockford symbols, strictly increasing within the process, time first."""

from __future__ import annotations

import itertools
import threading
import time

from corral.ids import MonotonicUlid, new_ulid, prefixed

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def as_int(ulid: str) -> int:
    value = 0
    for symbol in ulid:
        value = value * 32 + CROCKFORD.index(symbol)
    return value


def test_ulids_are_26_symbols_that_sort_in_creation_order_and_never_repeat() -> None:
    ids = [new_ulid() for _ in range(50_000)]
    assert all(len(i) == 26 and set(i) <= set(CROCKFORD) for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert prefixed("evt").startswith("evt_") and len(prefixed("evt")) == 30


def test_the_first_48_bits_are_the_milliseconds_and_ids_within_one_count_up() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_ulid() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    values = [as_int(i) for i in ids]
    assert all(before <= v >> 80 <= after for v in values)
    same_ms = [(a, b) for a, b in itertools.pairwise(values) if a >> 80 == b >> 80]
    assert same_ms and all(b == a + 1 for a, b in same_ms)
    assert len({v >> 80 for v in values}) == 1 or len({v & (2**80 - 1) for v in values}) > 1  # fresh randomness each ms


def test_ids_stay_increasing_when_the_clock_steps_back() -> None:
    ulids = MonotonicUlid()
    first = ulids.new()
    import corral.ids as ids_module

    real = time.time_ns
    ids_module.time.time_ns = lambda: real() - 10_000_000_000  # type: ignore[attr-defined]
    try:
        second = ulids.new()
    finally:
        ids_module.time.time_ns = real  # type: ignore[attr-defined]
    assert second > first


def test_threads_never_get_the_same_id() -> None:
    ulids = MonotonicUlid()
    out: list[list[str]] = [[] for _ in range(4)]

    def work(bucket: list[str]) -> None:
        bucket.extend(ulids.new() for _ in range(10_000))

    threads = [threading.Thread(target=work, args=(bucket,)) for bucket in out]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for bucket in out for i in bucket]
    assert len(set(every)) == len(every)


def test_the_stores_now_has_the_fixed_width_form_and_tracks_the_clock() -> None:
    from corral.storage.clock import parse_iso, to_iso, utc_now, utc_now_iso

    for _ in range(2000):  # across several second boundaries of the text cache, at times
        before, now, after = to_iso(utc_now()), utc_now_iso(), to_iso(utc_now())
        assert len(now) == 27 and now.endswith("Z") and before <= now <= after
        assert to_iso(parse_iso(now)) == now
