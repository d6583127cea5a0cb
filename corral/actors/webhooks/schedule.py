"""When a failed delivery is tried again (the specification's retry policy).

An event gets at most `1 + retry_count` attempts. Attempt 2 comes 30 s after the
first failure, attempt 3 five minutes after the second; attempt n >= 4 comes after
10 min x 2^(n-4), but never more than `retry_count` x 10 min nor 6 h. Every delay
is spread by +-10 % jitter (so many endpoints failing at once do not retry in
lockstep) and then multiplied by `CORRAL_WEBHOOK_RETRY_SCALE`.
"""

from __future__ import annotations

import random

FIRST_RETRY = 30.0
SECOND_RETRY = 5 * 60.0
STEP = 10 * 60.0
CAP = 6 * 3600.0
JITTER = 0.1

_random = random.SystemRandom()


def base_delay(attempt: int, retry_count: int) -> float:
    """Seconds before `attempt` (2 or more), before jitter and scale."""
    if attempt <= 2:
        return FIRST_RETRY
    if attempt == 3:
        return SECOND_RETRY
    return min(STEP * 2 ** (attempt - 4), retry_count * STEP, CAP)


def retry_delay(attempt: int, retry_count: int, *, scale: float = 1.0, rng: random.Random | None = None) -> float | None:
    """Seconds to wait before `attempt`, or None when `retry_count` allows no such attempt."""
    if attempt < 2 or attempt > 1 + retry_count:
        return None
    spread = (rng or _random).uniform(1 - JITTER, 1 + JITTER)
    return min(base_delay(attempt, retry_count) * spread, CAP) * scale
