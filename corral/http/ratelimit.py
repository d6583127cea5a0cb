"""Fixed-window rate limits per bucket (a key, a user session, or a client IP).

A window is one minute; `X-RateLimit-Reset` is the Unix second it ends.
`RateLimiter` keeps its buckets in this node's memory: the one node of a SQLite
store. `SharedRateLimiter` holds a limit across the nodes of a PostgreSQL store
(issue 30) without a store round trip per request: it counts in memory and, every
`SHARE_SECONDS` in a task of its own, adds its counts to the store in one batch that
answers the global totals (`corral.storage.rate_counts`). Between batches each node
lets through at most its share of what the window has left (`_Share` says how), so
that the nodes together stay within a few requests of the limit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio

from corral.storage import RateTotals

log = logging.getLogger("corral.http")

WINDOW_SECONDS = 60
PUBLIC_AUTH_RPM = 60
ANONYMOUS_RPM = 600
EGRESS_RPM = 300
"""The egress endpoints' own limit per key (specification: 300 requests per minute)."""


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_at: int
    retry_at: float | None = None
    """When a refused request may succeed, if before the window ends: a node that used
    its share of a shared window may get another at its next batch."""
    retry_after: int = field(init=False)
    """Whole seconds until then, counted once when the decision is made, so the error's
    message and its `Retry-After` header say the same (read apart, they could fall on
    either side of a second)."""

    def __post_init__(self) -> None:
        until = self.reset_at if self.retry_at is None else self.retry_at
        object.__setattr__(self, "retry_after", max(1, math.ceil(until - time.time())))

    def headers(self) -> dict[str, str]:
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_at),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after)
        return headers


class RateLimiter:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._windows: dict[str, tuple[int, int]] = {}
        self._clock = clock

    def hit(self, bucket: str, limit: int) -> RateDecision:
        """Count one request against `bucket` and say whether it may proceed."""
        now = self._clock()
        window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
        start, count = self._windows.get(bucket, (window, 0))
        if start != window:
            start, count = window, 0
        allowed = count < limit
        if allowed:
            count += 1
        self._windows[bucket] = (start, count)
        if len(self._windows) > 50_000:
            self._forget_before(window)
        return RateDecision(allowed, limit, max(0, limit - count), start + WINDOW_SECONDS)

    def _forget_before(self, window: int) -> None:
        self._windows = {k: v for k, v in self._windows.items() if v[0] >= window}


SHARE_SECONDS = 0.2
"""How often a node adds its counts to the store and learns the global totals: the lag
of what one node knows of the others."""
HEADROOM = 2
"""A node's allowance between batches is what the window has left over this many times
the nodes sharing: room for what the others let through since their last batch, which
this node cannot know yet (with 1, three nodes under a burst let through up to 25% too
many; with 2, at most a few requests; simulated in tests/http/test_ratelimit.py)."""


class CountSharing(Protocol):
    """Where the nodes add up their counts (`corral.storage.SharedRateCounts`)."""

    async def add(self, counts: Mapping[tuple[str, int], tuple[int, int]], window: int, now: float) -> RateTotals: ...


class _Share:
    """One bucket's window as this node knows it.

    `synced` is the global count at the last batch that included the bucket (or its
    hot entry); `flying` was sent in the batch under way; `pending` was let through
    since that batch was taken. Between two batches, with `n` nodes sharing, this node
    lets through at most `allowance = ceil((limit - global) / (HEADROOM * n))`: each
    node takes a part of what is left, so that the parts fit in the rest of the window
    however the load falls on the nodes, at the cost of refusing a burst on one node
    (`Retry-After: 1`) until its next batch grants it another part; a bucket's window
    thus fills up within a few batches (half of what is left each). A bucket neither
    in the last batch nor hot (at half its limit or more) is taken at half its limit:
    an unknown bucket gets an eighth of its limit a batch with two nodes. Alone
    (`n == 1`) there is no allowance: the node knows every count.
    """

    __slots__ = ("allowance", "epoch", "flying", "known_epoch", "limit", "pending", "since", "synced", "window")

    def __init__(self, window: int, limit: int) -> None:
        self.window = window
        self.limit = limit
        self.synced = 0
        self.flying = 0
        self.pending = 0
        self.since = 0
        self.allowance: int | None = None
        self.epoch = -1
        """The batch whose answer the allowance was computed from."""
        self.known_epoch = -1
        """The last batch whose answer included this bucket."""

    @property
    def count(self) -> int:
        """The global count as far as this node knows it."""
        return self.synced + self.flying + self.pending


class SharedRateLimiter(RateLimiter):
    """The limit of each bucket held across every node of a PostgreSQL store.

    `hit` stays in memory (a few dictionary look-ups); `run` is the task that adds
    this node's counts to the store every `SHARE_SECONDS` and takes back the totals.
    Accuracy: a node learns of the others' requests at most one batch late, and its
    allowance is computed from what it learned, so the cluster lets through the limit
    plus at most about one request per node (rounding) under a steady load; a batch
    lost to a store error is added to the next one, and a node killed loses at most
    one batch of counts (the others then let that many more through)."""

    def __init__(self, sharing: CountSharing, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self._sharing = sharing
        self._shares: dict[str, _Share] = {}
        self._dirty: list[tuple[str, _Share]] = []
        """Buckets let through since the last batch was taken: the next batch."""
        self._epoch = 0
        self._nodes = 2
        """The nodes sharing, as of the last batch (company assumed until one answers)."""
        self._hot: dict[str, int] = {}
        self._hot_window = -1
        self._window = -1
        self._failing = False

    def hit(self, bucket: str, limit: int) -> RateDecision:
        now = self._clock()
        window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
        share = self._shares.get(bucket)
        if share is None or share.window != window:
            share = self._shares[bucket] = _Share(window, limit)
        share.limit = limit
        if share.epoch != self._epoch:
            self._grant(bucket, share)
        reset_at = window + WINDOW_SECONDS
        count = share.count
        if count >= limit:
            return RateDecision(False, limit, 0, reset_at)
        if share.allowance is not None and share.since >= share.allowance:
            return RateDecision(False, limit, 0, reset_at, retry_at=now + SHARE_SECONDS)
        if share.pending == 0:
            self._dirty.append((bucket, share))
        share.pending += 1
        share.since += 1
        return RateDecision(True, limit, max(0, limit - count - 1), reset_at)

    def _grant(self, bucket: str, share: _Share) -> None:
        """This node's allowance of `bucket` until the next batch (`_Share`)."""
        share.epoch = self._epoch
        share.since = share.pending  # what was let through after the last batch was taken
        if self._nodes <= 1:
            share.allowance = None
            return
        hot = self._hot.get(bucket) if self._hot_window == share.window else None
        if hot is not None:
            share.synced = max(share.synced, hot - share.flying)
        known = share.known_epoch == self._epoch or hot is not None
        count = share.synced if known else max(share.synced, share.limit // 2)
        share.allowance = max(0, -((count - share.limit) // (self._nodes * HEADROOM)))

    async def share(self) -> None:
        """Add what this node let through since the last batch to the store; learn the
        global totals, the hot buckets and how many nodes share."""
        now = self._clock()
        window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
        if window != self._window:
            self._window = window
            self._shares = {bucket: share for bucket, share in self._shares.items() if share.window >= window}
        batch: dict[tuple[str, int], tuple[int, int]] = {}
        sent = self._dirty
        self._dirty = []
        for bucket, share in sent:
            batch[(bucket, share.window)] = (share.pending, share.limit)
            share.flying += share.pending
            share.pending = 0
        try:
            answer = await self._sharing.add(batch, window, now)
        except BaseException:
            for bucket, share in sent:  # into the next batch
                hits = batch[(bucket, share.window)][0]
                share.flying -= hits
                if share.pending == 0:
                    self._dirty.append((bucket, share))
                share.pending += hits
            raise
        self._epoch += 1
        self._nodes = answer.nodes
        self._hot = {bucket: hits for (bucket, start), hits in answer.hot.items() if start == window}
        self._hot_window = window
        for bucket, share in sent:
            key = (bucket, share.window)
            share.flying -= batch[key][0]
            if key in answer.totals:
                share.synced = answer.totals[key] - share.flying
                share.known_epoch = self._epoch

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Share every `SHARE_SECONDS` for as long as the node serves; a failed batch is
        logged once until one succeeds again, and its counts go into the next."""
        task_status.started()
        while True:
            try:
                await self.share()
                if self._failing:
                    log.info("rate-limit counts are shared again")
                self._failing = False
            except Exception:
                if not self._failing:
                    log.warning("could not share rate-limit counts; retrying every %.1f s", SHARE_SECONDS, exc_info=True)
                self._failing = True
            await trio.sleep(SHARE_SECONDS)
