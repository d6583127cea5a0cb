"""What the credits endpoints read and write: balance, transactions, usage, grants."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from corral.storage import Row, to_iso, utc_now

from . import ledger
from .notices import low_threshold, settle

if TYPE_CHECKING:
    from corral.actors.billing.services import BillingServices

TRANSACTION_FIELDS = (
    "id", "tenant_id", "user_id", "computer_id", "type", "amount_credits", "description", "provider", "model",
    "input_tokens", "output_tokens", "cost_usd_micros", "inserted_at",
    # additions (docs/api.md): what the row is about, and when a grant expires
    "resource_type", "resource_id", "external_user_id", "expires_at",
)


def transaction_public(row: Row) -> dict[str, Any]:
    return {name: row.get(name) for name in TRANSACTION_FIELDS}


async def grant_credits(
    platform: BillingServices, tenant_id: str, amount: int, description: str, *, user_id: str | None = None
) -> Row:
    """An operator grant (an `earn` lot) or, when negative, an `adjust` row."""
    row, outcome = await ledger.grant(
        platform.db, tenant_id, amount, description, user_id=user_id, low_threshold=low_threshold(platform)
    )
    await settle(platform, outcome)
    return row


async def get_balance(platform: BillingServices, tenant_id: str) -> dict[str, Any]:
    """The balance record; zeros and nulls when the tenant has no ledger yet."""
    now = to_iso(utc_now())
    due = await platform.db.fetch_value(
        "SELECT COUNT(*) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (tenant_id, now),
    )
    if due:
        _, outcome = await ledger.in_ledger(platform.db, tenant_id, lambda _: None, low_threshold=low_threshold(platform))
        await settle(platform, outcome)
    account = await platform.db.fetch_one("SELECT * FROM credit_accounts WHERE tenant_id = ?", (tenant_id,))
    if account is None:
        return {
            "tenant_id": tenant_id,
            "balance_credits": 0,
            "lifetime_earned": 0,
            "lifetime_spent": 0,
            "credit_expiry_at": None,
            "updated_at": None,
        }
    expiry = await platform.db.fetch_value(
        "SELECT MIN(expires_at) AS e FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0",
        (tenant_id,),
    )
    return {
        "tenant_id": tenant_id,
        "balance_credits": int(account["balance_credits"]),
        "lifetime_earned": int(account["lifetime_earned"]),
        "lifetime_spent": int(account["lifetime_spent"]),
        "credit_expiry_at": expiry,
        "updated_at": account["updated_at"],
    }


async def available_credits(platform: BillingServices, tenant_id: str) -> int:
    """The balance as a spend would see it now: lots past their expiry do not count."""
    balance = await platform.db.fetch_value(
        "SELECT balance_credits FROM credit_accounts WHERE tenant_id = ?", (tenant_id,)
    )
    if balance is None:
        return 0
    expired = await platform.db.fetch_value(
        "SELECT COALESCE(SUM(remaining_credits), 0) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (tenant_id, to_iso(utc_now())),
    )
    return int(balance) - int(expired or 0)


async def list_transactions(platform: BillingServices, tenant_id: str, page: int, page_size: int) -> tuple[list[Row], int]:
    """One page of the tenant's rows, newest first, and the total count."""
    total = await platform.db.fetch_value(
        "SELECT COUNT(*) AS n FROM credit_transactions WHERE tenant_id = ?", (tenant_id,)
    )
    rows = await platform.db.fetch_all(
        "SELECT * FROM credit_transactions WHERE tenant_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?",
        (tenant_id, page_size, (page - 1) * page_size),
    )
    return rows, int(total or 0)


async def usage(platform: BillingServices, tenant_id: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """`spend` rows between `start` and `end` (inclusive), by UTC day, provider and model.

    Compute rows (no provider) are reported as provider `compute`, model = the size."""
    rows = await platform.db.fetch_all(
        "SELECT SUBSTR(inserted_at, 1, 10) AS day,"
        " COALESCE(provider, 'compute') AS provider,"
        " COALESCE(model, size, 'unknown') AS model,"
        " -SUM(amount_credits) AS credits_spent,"
        " SUM(COALESCE(input_tokens, 0)) AS input_tokens,"
        " SUM(COALESCE(output_tokens, 0)) AS output_tokens,"
        " SUM(cost_usd_micros) AS cost_usd_micros,"
        " SUM(CASE WHEN provider IS NULL THEN 0 ELSE 1 END) AS call_count"
        " FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'spend' AND inserted_at >= ? AND inserted_at <= ?"
        " GROUP BY SUBSTR(inserted_at, 1, 10), COALESCE(provider, 'compute'), COALESCE(model, size, 'unknown')"
        " ORDER BY day, provider, model",
        (tenant_id, to_iso(start), to_iso(end)),
    )
    integers = ("credits_spent", "input_tokens", "output_tokens", "cost_usd_micros", "call_count")
    return [{**row, **{name: int(row[name] or 0) for name in integers}} for row in rows]
