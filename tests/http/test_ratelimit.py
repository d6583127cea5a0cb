"""The arithmetic of rate limits (`corral.http.ratelimit`): one node's fixed windows, and
the limit shared by several nodes through batches every `SHARE_SECONDS`. The nodes here
share through an in-memory stand-in for `corral.storage.SharedRateCounts` (its real
SQL is tested in tests/storage/test_rate_counts.py) on one simulated clock."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from corral.http.app import create_app
from corral.http.ratelimit import SHARE_SECONDS, RateDecision, RateLimiter, SharedRateLimiter
from corral.storage import RateTotals
from tests.support import Api

WINDOW = 1_800_000_000.0


@dataclass
class Clock:
    now: float = WINDOW

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    """What `rate_counts` keeps: the hits of each (bucket, window), the nodes that added."""

    hits: dict[tuple[str, int], int] = field(default_factory=dict)
    limits: dict[tuple[str, int], int] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)
    failing: bool = False

    def node(self, name: str) -> Sharing:
        return Sharing(self, name)


@dataclass
class Sharing:
    cluster: Cluster
    name: str

    async def add(self, counts: Mapping[tuple[str, int], tuple[int, int]], window: int, now: float) -> RateTotals:
        cluster = self.cluster
        if cluster.failing:
            raise OSError("the store is away")
        for key, (hits, limit) in counts.items():
            cluster.hits[key] = cluster.hits.get(key, 0) + hits
            cluster.limits[key] = limit
        cluster.seen[self.name] = now
        return RateTotals(
            totals={key: cluster.hits[key] for key in counts},
            hot={key: hits for key, hits in cluster.hits.items() if key[1] == window and hits * 2 >= cluster.limits[key]},
            nodes=sum(1 for seen in cluster.seen.values() if seen > now - 2),
        )


async def introduce(limiters: list[SharedRateLimiter]) -> None:
    """A batch from every node, twice: each knows how many share."""
    for _ in range(2):
        for limiter in limiters:
            await limiter.share()


def nodes(count: int, clock: Clock) -> tuple[Cluster, list[SharedRateLimiter]]:
    cluster = Cluster()
    return cluster, [SharedRateLimiter(cluster.node(f"node-{i}"), clock) for i in range(count)]


async def serve(limiters: list[SharedRateLimiter], clock: Clock, *, seconds: float, per_second: float, bucket: str = "key:k1", limit: int = 600) -> int:
    """Requests at `per_second` for `seconds`, turn about across the nodes, each node
    sending a batch every `SHARE_SECONDS` (the nodes' batches evenly staggered): how
    many were let through."""
    step = 1 / per_second
    next_batch = [clock.now + SHARE_SECONDS * i / len(limiters) for i in range(len(limiters))]
    allowed, i, end = 0, 0, clock.now + seconds
    while clock.now < end:
        for n, limiter in enumerate(limiters):
            if clock.now >= next_batch[n]:
                await limiter.share()
                next_batch[n] += SHARE_SECONDS
        allowed += limiters[i % len(limiters)].hit(bucket, limit).allowed
        i += 1
        clock.now += step
    return allowed


def test_one_node_counts_a_fixed_minute_per_bucket() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    decisions = [limiter.hit("key:k1", 3) for _ in range(4)]
    assert [(d.allowed, d.remaining) for d in decisions] == [(True, 2), (True, 1), (True, 0), (False, 0)]
    assert (decisions[-1].reset_at, decisions[-1].retry_at) == (WINDOW + 60, None)
    assert "Retry-After" in decisions[-1].headers() and "Retry-After" not in decisions[0].headers()
    assert limiter.hit("key:k2", 3).allowed  # a bucket of its own
    clock.now += 60
    assert limiter.hit("key:k1", 3).remaining == 2  # a new window


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize(("limit", "per_second"), [(600, 100), (600, 2000), (100, 400), (30_000, 2000)])
async def test_nodes_together_stay_within_a_few_requests_of_the_limit_under_a_steady_load(count: int, limit: int, per_second: float) -> None:
    clock = Clock()
    _, limiters = nodes(count, clock)
    await introduce(limiters)
    allowed = await serve(limiters, clock, seconds=59, per_second=per_second, limit=limit)
    offered = int(59 * per_second)
    assert allowed <= limit * 1.05, allowed  # a few too many at most (one a node, rounding, at the end)
    assert allowed >= min(offered, limit) * 0.9, allowed


async def test_a_burst_on_one_node_gets_a_part_a_batch_then_the_rest() -> None:
    clock = Clock()
    cluster, (a, b) = nodes(2, clock)
    await introduce([a, b])
    burst = [a.hit("key:k1", 100) for _ in range(100)]  # all at once, before a's next batch
    assert sum(d.allowed for d in burst) == 13  # unknown: taken at 50, a quarter of the other 50
    refused = burst[-1]
    assert (refused.allowed, refused.remaining, refused.reset_at, refused.retry_at) == (False, 0, WINDOW + 60, clock.now + SHARE_SECONDS)
    clock.now += SHARE_SECONDS
    await a.share()
    assert sum(a.hit("key:k1", 100).allowed for _ in range(100)) == 22  # a quarter of what is left (87)
    parts = [13, 22]
    while sum(parts) < 100:  # a keeps bursting; b, idle, keeps sharing (so still takes a part)
        clock.now += SHARE_SECONDS
        await b.share()
        await a.share()
        parts.append(sum(a.hit("key:k1", 100).allowed for _ in range(100)))
    assert sum(parts[:6]) >= 75 and len(parts) <= 15  # three quarters within 1 s, the whole limit within 3 s
    await a.share()
    assert sum(parts) == cluster.hits[("key:k1", int(WINDOW))] == 100


def test_a_refusal_until_the_next_batch_says_retry_in_a_second() -> None:
    decision = RateDecision(False, 100, 0, int(time.time()) + 60, retry_at=time.time() + SHARE_SECONDS)
    assert decision.headers()["Retry-After"] == "1" and decision.retry_after == 1


async def test_remaining_counts_what_the_other_nodes_let_through() -> None:
    clock = Clock()
    _, (a, b) = nodes(2, clock)
    for _ in range(10):
        assert a.hit("key:k1", 600).allowed
    await introduce([a, b])
    assert [b.hit("key:k1", 600).remaining for _ in range(3)] == [599, 598, 597]  # b has not heard of a's yet
    await b.share()  # b's batch answers the global total: a's ten included
    assert b.hit("key:k1", 600).remaining == 600 - 13 - 1


async def test_a_node_alone_lets_the_whole_limit_through_at_once() -> None:
    clock = Clock()
    _, (alone,) = nodes(1, clock)
    await alone.share()  # no other node answered
    decisions = [alone.hit("key:k1", 100) for _ in range(101)]
    assert [d.remaining for d in decisions[:3]] == [99, 98, 97]
    assert sum(d.allowed for d in decisions) == 100 and decisions[-1].retry_at is None  # refused until the window ends


async def test_a_failed_batch_goes_into_the_next() -> None:
    clock = Clock()
    cluster, (a, b) = nodes(2, clock)
    await introduce([a, b])
    for _ in range(5):
        a.hit("key:k1", 600)
    cluster.failing = True
    with pytest.raises(OSError):
        await a.share()
    a.hit("key:k1", 600)
    cluster.failing = False
    await a.share()
    assert cluster.hits == {("key:k1", int(WINDOW)): 6}


async def test_a_new_window_starts_from_nothing_and_the_old_is_forgotten() -> None:
    clock = Clock()
    cluster, (a, b) = nodes(2, clock)
    await serve([a, b], clock, seconds=2, per_second=500, limit=50)
    assert a.hit("key:k1", 50).allowed is False
    clock.now = WINDOW + 60
    assert a.hit("key:k1", 50).allowed
    await a.share()
    assert cluster.hits[("key:k1", int(WINDOW) + 60)] == 1
    assert all(share.window == int(WINDOW) + 60 for share in a._shares.values())


async def test_a_sqlite_node_keeps_its_own_limiter(api: Api) -> None:
    """One node: the limiter of before, no task, no row."""
    pipeline = create_app(api.platform).extensions["corral.pipeline"]
    assert type(pipeline.limiter) is RateLimiter and api.platform.rate_counts is None
    assert await api.platform.db.fetch_value("SELECT count(*) FROM rate_counts") == 0
