"""When a failed request is worth sending again, and how long to wait first.

429 is always retried: the server refused before doing anything, and says when to
come back (`Retry-After`). A 5xx or a broken connection is retried only when sending
the request twice cannot do the work twice: GET, HEAD, PUT, DELETE, OPTIONS, and a
POST or PATCH that carries an `Idempotency-Key` (the server replays its first reply).
A connection that was never opened is always safe to retry.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

__all__ = ["IDEMPOTENT_METHODS", "RetryPolicy"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRIED_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    """Further attempts after the first; 0 turns retries off."""
    backoff: float = 0.5
    """The first wait in seconds; it doubles with each attempt, with jitter."""
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    """A longer `Retry-After` is not waited for: the 429 is raised instead."""

    def safe(self, method: str, headers: httpx.Headers | dict[str, str]) -> bool:
        return method.upper() in IDEMPOTENT_METHODS or any(name.lower() == "idempotency-key" for name in headers)

    def delay_for_status(self, attempt: int, method: str, response: httpx.Response) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None to give up."""
        if attempt >= self.max_retries:
            return None
        if response.status_code == 429:
            retry_after = _seconds(response.headers.get("Retry-After"))
            if retry_after is None:
                return self._backoff(attempt)
            return retry_after if retry_after <= self.max_retry_after else None
        if response.status_code in RETRIED_STATUSES and self.safe(method, response.request.headers):
            return self._backoff(attempt)
        return None

    def delay_for_error(self, attempt: int, method: str, headers: httpx.Headers, error: httpx.TransportError) -> float | None:
        if attempt >= self.max_retries:
            return None
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout) or self.safe(method, headers):
            return self._backoff(attempt)
        return None

    def _backoff(self, attempt: int) -> float:
        base = min(self.max_backoff, self.backoff * (2**attempt))
        return base * (0.5 + random.random() / 2)


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
