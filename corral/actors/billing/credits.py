"""What the credits endpoints read and write: balance, transactions, usage, grants."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from corral.storage import to_iso, utc_now

from . import ledger, store
from .notices import low_threshold, settle
from .services import BillingServices
from .store import TransactionRecord

TRANSACTION_FIELDS = (
    "id", "tenant_id", "user_id", "computer_id", "type", "amount_credits", "description", "provider", "model",
    "input_tokens", "output_tokens", "cost_usd_micros", "inserted_at",
    # additions (docs/api.md): what the row is about, and when a grant expires
    "resource_type", "resource_id", "external_user_id", "expires_at",
)


def transaction_public(record: TransactionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in TRANSACTION_FIELDS}


async def grant_credits(
    platform: BillingServices, tenant_id: str, amount: int, description: str, *, user_id: str | None = None
) -> TransactionRecord:
    """An operator grant (an `earn` lot) or, when negative, an `adjust` row."""
    row, outcome = await ledger.grant(
        platform.db, tenant_id, amount, description, user_id=user_id, low_threshold=low_threshold(platform)
    )
    await settle(platform, outcome)
    return row


async def get_balance(platform: BillingServices, tenant_id: str) -> dict[str, Any]:
    """The balance record; zeros and nulls when the tenant has no ledger yet."""
    if await store.has_expiry_due(platform.db, tenant_id, to_iso(utc_now())):
        _, outcome = await ledger.in_ledger(platform.db, tenant_id, lambda _: None, low_threshold=low_threshold(platform))
        await settle(platform, outcome)
    account = await store.find_account(platform.db, tenant_id)
    if account is None:
        return {
            "tenant_id": tenant_id,
            "balance_credits": 0,
            "lifetime_earned": 0,
            "lifetime_spent": 0,
            "credit_expiry_at": None,
            "updated_at": None,
        }
    return {
        "tenant_id": tenant_id,
        "balance_credits": int(account.balance_credits),
        "lifetime_earned": int(account.lifetime_earned),
        "lifetime_spent": int(account.lifetime_spent),
        "credit_expiry_at": await store.next_expiry(platform.db, tenant_id),
        "updated_at": account.updated_at,
    }


async def available_credits(platform: BillingServices, tenant_id: str) -> int:
    """The balance as a spend would see it now: lots past their expiry do not count."""
    balance = await store.balance(platform.db, tenant_id)
    if balance is None:
        return 0
    return balance - await store.expired_credits(platform.db, tenant_id, to_iso(utc_now()))


async def list_transactions(
    platform: BillingServices, tenant_id: str, page: int, page_size: int
) -> tuple[list[TransactionRecord], int]:
    """One page of the tenant's rows, newest first, and the total count."""
    total = await store.transaction_count(platform.db, tenant_id)
    records = await store.transactions_page(platform.db, tenant_id, page_size, (page - 1) * page_size)
    return records, total


async def usage(platform: BillingServices, tenant_id: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """`spend` rows between `start` and `end` (inclusive), by UTC day, provider and model.

    Compute rows (no provider) are reported as provider `compute`, model = the size."""
    return [dataclasses.asdict(record) for record in await store.usage(platform.db, tenant_id, to_iso(start), to_iso(end))]
