"""The last minutes of API requests, for the operator views (`GET /api/v1/admin/node`).

A request observer (`observe.py` calls it with each answered request's record) that
keeps ten-second buckets of counts, server errors and latency for the last five
minutes, so the operator page and `corral admin top` can show a request rate and
latency at once, without a metrics server. It is installed on every node (it costs a
few arithmetic operations a request), whether or not Prometheus metrics are on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from corral.request_observers import RequestObservers

BUCKET_SECONDS = 10
KEPT_BUCKETS = 30
"""Five minutes of ten-second buckets."""
RATE_SECONDS = 60
"""The span `per_second` and the latency figures are computed over."""


class AnsweredRequest(Protocol):
    """What is read of `corral.http.observe.RequestRecord`."""

    status: int
    duration_seconds: float


@dataclass
class Bucket:
    start: int
    requests: int = 0
    errors: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0

    def public(self) -> dict[str, Any]:
        return {
            "at": self.start,
            "requests": self.requests,
            "errors": self.errors,
            "mean_ms": round(self.latency_sum / self.requests * 1000, 2) if self.requests else None,
            "max_ms": round(self.latency_max * 1000, 2) if self.requests else None,
        }


class RequestWindow:
    """Counts answered requests; `summary()` is what the operator views show."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.started_at = clock()
        """When the window was installed: when this node's API started."""
        self.total = 0
        self.errors_total = 0
        self._buckets: deque[Bucket] = deque(maxlen=KEPT_BUCKETS)

    def __call__(self, record: AnsweredRequest) -> None:
        start = int(self._clock()) // BUCKET_SECONDS * BUCKET_SECONDS
        if not self._buckets or self._buckets[-1].start != start:
            self._buckets.append(Bucket(start))
        bucket = self._buckets[-1]
        bucket.requests += 1
        duration = record.duration_seconds
        bucket.latency_sum += duration
        bucket.latency_max = max(bucket.latency_max, duration)
        self.total += 1
        if record.status >= 500 or record.status == 0:
            bucket.errors += 1
            self.errors_total += 1

    def summary(self) -> dict[str, Any]:
        now = self._clock()
        horizon = now - KEPT_BUCKETS * BUCKET_SECONDS
        kept = [bucket for bucket in self._buckets if bucket.start >= horizon]
        cutoff = int(now) // BUCKET_SECONDS * BUCKET_SECONDS - RATE_SECONDS + BUCKET_SECONDS
        recent = [bucket for bucket in kept if bucket.start >= cutoff]
        requests = sum(bucket.requests for bucket in recent)
        span = max(1.0, now - max(cutoff, self.started_at))  # the whole buckets counted, or the uptime
        return {
            "total": self.total,
            "errors_total": self.errors_total,
            "window_seconds": RATE_SECONDS,
            "per_second": round(requests / span, 3),
            "errors": sum(bucket.errors for bucket in recent),
            "mean_ms": round(sum(b.latency_sum for b in recent) / requests * 1000, 2) if requests else None,
            "max_ms": round(max(b.latency_max for b in recent) * 1000, 2) if requests else None,
            "bucket_seconds": BUCKET_SECONDS,
            "buckets": [bucket.public() for bucket in kept],
        }

    def started(self) -> dict[str, Any]:
        return {
            "started_at": datetime.fromtimestamp(self.started_at, UTC).isoformat().replace("+00:00", "Z"),
            "uptime_seconds": round(self._clock() - self.started_at, 1),
        }


def request_window(observers: RequestObservers) -> RequestWindow:
    """The window among `observers`, added there first if there is none (idempotent:
    `create_app` installs it, and a route asks for it the same way)."""
    for observer in observers:
        if isinstance(observer, RequestWindow):
            return observer
    window = RequestWindow()
    observers.append(window)
    return window
