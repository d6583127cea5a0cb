"""Fixed-window rate limits per bucket (a key, a user session, or a client IP).

A window is one minute; `X-RateLimit-Reset` is the Unix second it ends. Buckets
live in this node's memory: with several nodes each enforces its own share, which
is what the `X-RateLimit-*` headers report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

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

    @property
    def retry_after(self) -> int:
        return max(1, math.ceil(self.reset_at - time.time()))

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
