"""AI usage rows: tokens priced by the specification's per-million-token table.

A call usually costs a fraction of a credit. The fraction is carried on the
tenant's account (`ai_carry_micro`, millionths of a credit) and each call's row
posts the whole credits that have accrued with it, so many small calls are charged
exactly, never rounded away or up. Every call gets its own row (possibly of 0
credits) so usage can count calls and tokens.
"""

from __future__ import annotations

from . import ledger
from .ledger import Ledger
from .notices import low_threshold, settle
from .pricing import CREDIT_VALUE_USD_MICROS, MICRO, Tier, ai_micro_credits, model_tier
from .services import BillingServices
from .store import TransactionRecord


async def record_ai_usage(
    platform: BillingServices,
    *,
    tenant_id: str,
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    user_id: str | None = None,
    computer_id: str | None = None,
    resource_type: str | None = None,
    resource_id: str | None = None,
    external_user_id: str | None = None,
    tier: Tier | None = None,
    cost_usd_micros: int | None = None,
    description: str | None = None,
) -> TransactionRecord:
    """Record one AI call and charge it; returns its `spend` row.

    `tier` defaults from the model name (`pricing.model_tier`); `cost_usd_micros` is
    the provider's price when the caller knows it, else the credits' nominal value."""
    if input_tokens < 0 or output_tokens < 0:
        raise ValueError("token counts must be non-negative")
    micro = ai_micro_credits(input_tokens, output_tokens, tier or model_tier(model))
    cost = cost_usd_micros if cost_usd_micros is not None else micro * CREDIT_VALUE_USD_MICROS // MICRO

    def work(ledger_: Ledger) -> TransactionRecord:
        return ledger_.consume(
            ledger_.add_ai_usage(micro),
            "spend",
            description or f"{provider} {model}: {input_tokens} input and {output_tokens} output tokens",
            user_id=user_id,
            computer_id=computer_id,
            resource_type=resource_type,
            resource_id=resource_id,
            external_user_id=external_user_id,
            provider=provider,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd_micros=cost,
        )

    row, outcome = await ledger.in_ledger(platform.db, tenant_id, work, low_threshold=low_threshold(platform))
    await settle(platform, outcome)
    return row
