"""The specification's pricing constants (Limits) and the arithmetic on them.

Everything is integer arithmetic: compute time accrues as `credits_per_hour x
microseconds`, whose whole multiples of `MICROS_PER_HOUR` are credits; AI usage is
priced in millionths of a credit. Nothing is rounded away: what does not make a
whole credit yet is carried (contract §9).
"""

from __future__ import annotations

from typing import Literal

COMPUTE_CREDITS_PER_HOUR: dict[str, int] = {"small": 3, "medium": 6, "large": 12}
"""Spec Limits: compute credits per hour by size."""

MICROS_PER_HOUR = 3_600_000_000
"""One hour in microseconds: the denominator of accrued compute time."""

MICRO = 1_000_000
"""Millionths of a credit per credit (AI usage is priced at this precision)."""

Tier = Literal["standard", "advanced"]

AI_CREDITS_PER_MILLION_TOKENS: dict[str, tuple[int, int]] = {
    "standard": (10, 20),
    "advanced": (60, 100),
}
"""Spec Limits: AI credits per 1M tokens, (input, output), by model tier."""

ADVANCED_MODEL_MARKERS = ("opus", "o1", "o3", "ultra", "-pro", "gpt-4.5")
"""Model-name fragments priced as advanced when the caller does not say (docs/api.md)."""

CREDIT_EXPIRY_DAYS = 180
"""Spec Limits: credits expire 180 days from their grant."""

CREDIT_VALUE_USD_MICROS = 10_000
"""Nominal value of one credit, one US cent: the unit of `max_credit_cents` and of
`cost_usd_micros` when a caller does not report the provider's own price."""

def hourly_credits(size: str) -> int:
    """Credits one hour of `size` costs; unknown sizes are priced as `large`."""
    return COMPUTE_CREDITS_PER_HOUR.get(size, COMPUTE_CREDITS_PER_HOUR["large"])


def model_tier(model: str) -> Tier:
    name = model.lower()
    return "advanced" if any(marker in name for marker in ADVANCED_MODEL_MARKERS) else "standard"


def ai_micro_credits(input_tokens: int, output_tokens: int, tier: Tier) -> int:
    """Millionths of a credit for one AI call: exact, since rates are per million tokens."""
    per_input, per_output = AI_CREDITS_PER_MILLION_TOKENS[tier]
    return input_tokens * per_input + output_tokens * per_output


def accrue(carry: int, credits_per_hour: int, elapsed_micros: int) -> tuple[int, int]:
    """(whole credits now due, new carry) after `elapsed_micros` more of running time.

    `carry` is in credit-microseconds-per-hour units (`< MICROS_PER_HOUR`)."""
    total = carry + credits_per_hour * max(0, elapsed_micros)
    return divmod(total, MICROS_PER_HOUR)
