"""Billing's tables: every query about the ledger, the meters and end-user quotas,
returning frozen records.

Billing has no actor; each table has one owner module in this package, the only
caller of its writes: `ledger` writes `credit_accounts` and `credit_transactions`
(always inside a `Ledger`, with the account row locked), `metering` writes
`credit_meters` (inside the same ledger transaction as the rows it posts), `quotas`
writes `external_user_quotas`. Reads are for anyone in the package. The queries over
the instance kinds' own tables (quota usage, unmetered instances) read only the
columns every registered inventory has (`hooks.Inventory`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.actors.record import RowStore
from corral.storage import Database, Row, Transaction, sql_identifier

QUOTA_LIMITS = ("max_sandboxes", "max_concurrent", "max_storage_gb", "max_credit_cents")
"""The limit columns of a quota (spec "Quotas"); None in a column is uncapped."""


@dataclass(frozen=True, slots=True)
class AccountRecord:
    """A tenant's `credit_accounts` row: the balance and the ledger's bookkeeping."""

    tenant_id: str
    balance_credits: int
    lifetime_earned: int
    lifetime_spent: int
    debt_credits: int
    ai_carry_micro: int
    """Millionths of a credit of AI usage accrued but not yet posted."""
    last_seq: int
    low_notified: int
    exhausted_notified: int
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One ledger row (`credit_transactions`): `earn`, `spend`, `adjust` or `expire`."""

    id: str
    tenant_id: str
    seq: int
    type: str
    amount_credits: int
    description: str
    user_id: str | None
    computer_id: str | None
    resource_type: str | None
    resource_id: str | None
    external_user_id: str | None
    size: str | None
    provider: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd_micros: int
    grant_id: str | None
    expires_at: str | None
    remaining_credits: int | None
    """What is left of an `earn` lot (None on other rows)."""
    inserted_at: str


@dataclass(frozen=True, slots=True)
class MeterRecord:
    """The meter of one instance (`credit_meters`, keyed by resource type and id)."""

    resource_type: str
    resource_id: str
    tenant_id: str
    size: str
    credits_per_hour: int
    user_id: str | None
    external_user_id: str | None
    running: int
    accrued_until: str | None
    """Since when its running time has not been charged (None while stopped)."""
    carry: int
    """Accrued credit-microseconds per hour not yet a whole credit."""
    updated_at: str


@dataclass(frozen=True, slots=True)
class QuotaRecord:
    """An end user's quota (`external_user_quotas`, keyed by tenant and `external_user_id`)."""

    tenant_id: str
    external_user_id: str
    max_sandboxes: int | None
    max_concurrent: int | None
    max_storage_gb: int | None
    max_credit_cents: int | None
    created_at: str
    updated_at: str

    def limits(self) -> dict[str, int | None]:
        """Limit name -> its value, None where uncapped."""
        values = (self.max_sandboxes, self.max_concurrent, self.max_storage_gb, self.max_credit_cents)
        return {name: None if value is None else int(value) for name, value in zip(QUOTA_LIMITS, values, strict=True)}


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """`spend` rows of one UTC day, provider and model, summed (`credits.usage`)."""

    day: str
    provider: str
    model: str
    credits_spent: int
    input_tokens: int
    output_tokens: int
    cost_usd_micros: int
    call_count: int

    @classmethod
    def of(cls, row: Row) -> UsageRecord:
        """From an aggregate row: sums arrive as None (no rows) or Decimal (PostgreSQL)."""
        text = ("day", "provider", "model")
        values: dict[str, Any] = {name: value if name in text else int(value or 0) for name, value in row.items()}
        return cls(**values)


@dataclass(frozen=True, slots=True)
class InstanceState:
    """What quotas count of one instance of any kind (`Inventory`'s table)."""

    id: str
    size: str
    status: str


@dataclass(frozen=True, slots=True)
class UnmeteredInstance:
    """A running instance of any kind without a running meter (`metering.MeteredInstance`)."""

    id: str
    tenant_id: str
    size: str
    owner_user_id: str | None
    external_user_id: str | None


ACCOUNTS = RowStore("credit_accounts", AccountRecord, id_column="tenant_id")
TRANSACTIONS = RowStore("credit_transactions", TransactionRecord)
METERS = RowStore("credit_meters", MeterRecord, id_column="resource_id")
"""Keyed by (resource_type, resource_id): its queries below name both columns."""
QUOTAS = RowStore("external_user_quotas", QuotaRecord, id_column="external_user_id")
"""Keyed by (tenant_id, external_user_id): its queries below name both columns."""


def _for_update(tx: Transaction) -> str:
    """Row locks for PostgreSQL; SQLite serialises every write transaction anyway."""
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def _first_column(rows: list[Row]) -> list[str]:
    """The value of each row of a one-column query, as text (`Database.fetch_value`, row by row)."""
    return [str(next(iter(row.values()))) for row in rows]


# -- credit_accounts and credit_transactions (written by `ledger`) ----------------------

_OPEN_LOTS = (
    "SELECT * FROM credit_transactions"
    " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at {op} ?"
    " ORDER BY expires_at, seq"
)


def lock_account(tx: Transaction, tenant_id: str, now: str) -> AccountRecord:
    """The tenant's account, created if needed, locked until the transaction ends."""
    tx.execute(
        "INSERT INTO credit_accounts (tenant_id, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (tenant_id) DO NOTHING",
        (tenant_id, now, now),
    )
    row = tx.fetch_one(f"SELECT * FROM credit_accounts WHERE tenant_id = ?{_for_update(tx)}", (tenant_id,))
    assert row is not None
    return ACCOUNTS.record(row)


def write_account(tx: Transaction, account: AccountRecord) -> None:
    """Store the locked account's balance and bookkeeping back."""
    tx.execute(
        "UPDATE credit_accounts SET balance_credits = ?, lifetime_earned = ?, lifetime_spent = ?,"
        " debt_credits = ?, ai_carry_micro = ?, last_seq = ?, low_notified = ?, exhausted_notified = ?,"
        " updated_at = ? WHERE tenant_id = ?",
        (
            account.balance_credits,
            account.lifetime_earned,
            account.lifetime_spent,
            account.debt_credits,
            account.ai_carry_micro,
            account.last_seq,
            account.low_notified,
            account.exhausted_notified,
            account.updated_at,
            account.tenant_id,
        ),
    )


def insert_transaction(tx: Transaction, record: TransactionRecord) -> None:
    TRANSACTIONS.insert(tx, record)


def open_lots(tx: Transaction, tenant_id: str, now: str, *, expired: bool) -> list[TransactionRecord]:
    """The tenant's `earn` lots with credits left, soonest expiry first: those still
    open at `now`, or (`expired`) those whose expiry has come."""
    return TRANSACTIONS.records(tx.fetch_all(_OPEN_LOTS.format(op="<=" if expired else ">"), (tenant_id, now)))


def take_from_lot(tx: Transaction, lot_id: str, amount: int) -> None:
    tx.execute("UPDATE credit_transactions SET remaining_credits = remaining_credits - ? WHERE id = ?", (amount, lot_id))


def empty_lot(tx: Transaction, lot_id: str) -> None:
    tx.execute("UPDATE credit_transactions SET remaining_credits = 0 WHERE id = ?", (lot_id,))


async def find_account(db: Database, tenant_id: str) -> AccountRecord | None:
    return await ACCOUNTS.load(db, tenant_id)


async def balance(db: Database, tenant_id: str) -> int | None:
    """The stored balance; None when the tenant has no ledger yet."""
    value = await ACCOUNTS.value(db, tenant_id, "balance_credits")
    return None if value is None else int(value)


async def expired_credits(db: Database, tenant_id: str, now: str) -> int:
    """Credits still in lots whose expiry has come but is not posted yet."""
    value = await db.fetch_value(
        "SELECT COALESCE(SUM(remaining_credits), 0) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (tenant_id, now),
    )
    return int(value or 0)


async def has_expiry_due(db: Database, tenant_id: str, now: str) -> bool:
    value = await db.fetch_value(
        "SELECT COUNT(*) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (tenant_id, now),
    )
    return bool(value)


async def tenants_with_expiry_due(db: Database, now: str) -> list[str]:
    rows = await db.fetch_all(
        "SELECT DISTINCT tenant_id FROM credit_transactions WHERE type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (now,),
    )
    return _first_column(rows)


async def next_expiry(db: Database, tenant_id: str) -> str | None:
    """When the tenant's next open lot expires."""
    value = await db.fetch_value(
        "SELECT MIN(expires_at) AS e FROM credit_transactions WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0",
        (tenant_id,),
    )
    return None if value is None else str(value)


async def transaction_count(db: Database, tenant_id: str) -> int:
    value = await db.fetch_value("SELECT COUNT(*) AS n FROM credit_transactions WHERE tenant_id = ?", (tenant_id,))
    return int(value or 0)


async def transactions_page(db: Database, tenant_id: str, limit: int, offset: int) -> list[TransactionRecord]:
    """The tenant's rows, newest first."""
    rows = await db.fetch_all(
        "SELECT * FROM credit_transactions WHERE tenant_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?", (tenant_id, limit, offset)
    )
    return TRANSACTIONS.records(rows)


async def usage(db: Database, tenant_id: str, start: str, end: str) -> list[UsageRecord]:
    """`spend` rows from `start` to `end` (inclusive), by UTC day, provider and model.

    Compute rows (no provider) count as provider `compute`, model = the size."""
    rows = await db.fetch_all(
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
        (tenant_id, start, end),
    )
    return [UsageRecord.of(row) for row in rows]


async def credits_spent(db: Database, tenant_id: str, external_user_id: str) -> int:
    """Credits spent by the end user's instances and AI calls (one credit = one cent)."""
    value = await db.fetch_value(
        "SELECT COALESCE(-SUM(amount_credits), 0) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND external_user_id = ? AND type = 'spend'",
        (tenant_id, external_user_id),
    )
    return int(value or 0)


# -- credit_meters (written by `metering`) ----------------------------------------------

_METER = "resource_type = ? AND resource_id = ?"


def lock_meter(tx: Transaction, resource_type: str, resource_id: str) -> MeterRecord | None:
    row = tx.fetch_one(f"SELECT * FROM credit_meters WHERE {_METER}{_for_update(tx)}", (resource_type, resource_id))
    return None if row is None else METERS.record(row)


def lock_running_meters(tx: Transaction, tenant_id: str) -> list[MeterRecord]:
    rows = tx.fetch_all(
        f"SELECT * FROM credit_meters WHERE tenant_id = ? AND running = 1 ORDER BY resource_type, resource_id{_for_update(tx)}",
        (tenant_id,),
    )
    return METERS.records(rows)


def insert_meter(tx: Transaction, meter: MeterRecord) -> None:
    METERS.insert(tx, meter)


def restart_meter(tx: Transaction, meter: MeterRecord) -> None:
    """Write a stopped meter's new run (its carry stays as stored)."""
    values: dict[str, Any] = {
        "tenant_id": meter.tenant_id,
        "size": meter.size,
        "credits_per_hour": meter.credits_per_hour,
        "user_id": meter.user_id,
        "external_user_id": meter.external_user_id,
        "running": meter.running,
        "accrued_until": meter.accrued_until,
        "updated_at": meter.updated_at,
    }
    assignments = ", ".join(f"{name} = ?" for name in values)
    tx.execute(
        f"UPDATE credit_meters SET {assignments} WHERE {_METER}", (*values.values(), meter.resource_type, meter.resource_id)
    )


def advance_meter(tx: Transaction, meter: MeterRecord, now: str, carry: int) -> None:
    """Running time up to `now` is charged; `carry` is what did not make a whole credit."""
    tx.execute(
        f"UPDATE credit_meters SET accrued_until = ?, carry = ?, updated_at = ? WHERE {_METER}",
        (now, carry, now, meter.resource_type, meter.resource_id),
    )


def stop_meter(tx: Transaction, resource_type: str, resource_id: str, now: str) -> None:
    tx.execute(
        f"UPDATE credit_meters SET running = 0, accrued_until = NULL, updated_at = ? WHERE {_METER}",
        (now, resource_type, resource_id),
    )


async def find_meter(db: Database, resource_type: str, resource_id: str) -> MeterRecord | None:
    row = await db.fetch_one(f"SELECT * FROM credit_meters WHERE {_METER}", (resource_type, resource_id))
    return None if row is None else METERS.record(row)


async def tenants_with_running_meters(db: Database) -> list[str]:
    rows = await db.fetch_all("SELECT DISTINCT tenant_id FROM credit_meters WHERE running = 1")
    return _first_column(rows)


async def running_meters(db: Database, tenant_id: str) -> list[MeterRecord]:
    return await METERS.where(db, [("tenant_id", tenant_id)], also="running = 1", order_by="resource_type, resource_id")


async def unmetered_instances(db: Database, resource_type: str, table: str) -> list[UnmeteredInstance]:
    """Running instances in `table` (of `resource_type`) that have no running meter."""
    rows = await db.fetch_all(
        f"SELECT t.id, t.tenant_id, t.size, t.owner_user_id, t.external_user_id FROM {sql_identifier(table)} t"
        " WHERE t.status = 'running'"
        " AND NOT EXISTS (SELECT 1 FROM credit_meters m"
        " WHERE m.resource_type = ? AND m.resource_id = t.id AND m.running = 1)",
        (resource_type,),
    )
    return [UnmeteredInstance(**row) for row in rows]


# -- external_user_quotas (written by `quotas`) -----------------------------------------

_QUOTA = "tenant_id = ? AND external_user_id = ?"


async def find_quota(db: Database, tenant_id: str, external_user_id: str) -> QuotaRecord | None:
    row = await db.fetch_one(f"SELECT * FROM external_user_quotas WHERE {_QUOTA}", (tenant_id, external_user_id))
    return None if row is None else QUOTAS.record(row)


async def upsert_quota(db: Database, tenant_id: str, external_user_id: str, limits: dict[str, int | None], now: str) -> None:
    """Every limit of `QUOTA_LIMITS` set from `limits` (missing: uncapped); `created_at` kept."""
    values = {name: limits.get(name) for name in QUOTA_LIMITS}
    assignments = ", ".join(f"{name} = excluded.{name}" for name in values)
    await db.execute(
        "INSERT INTO external_user_quotas (tenant_id, external_user_id, max_sandboxes, max_concurrent,"
        " max_storage_gb, max_credit_cents, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        f" ON CONFLICT (tenant_id, external_user_id) DO UPDATE SET {assignments}, updated_at = excluded.updated_at",
        (tenant_id, external_user_id, *values.values(), now, now),
    )


async def delete_quota(db: Database, tenant_id: str, external_user_id: str) -> bool:
    return await db.execute(f"DELETE FROM external_user_quotas WHERE {_QUOTA}", (tenant_id, external_user_id)) > 0


async def live_instances(
    db: Database, table: str, tenant_id: str, external_user_id: str, gone_states: tuple[str, ...]
) -> list[InstanceState]:
    """The end user's instances in `table` that still exist (status not in `gone_states`)."""
    marks = ", ".join("?" for _ in gone_states) or "''"
    rows = await db.fetch_all(
        f"SELECT id, size, status FROM {sql_identifier(table)}"
        f" WHERE tenant_id = ? AND external_user_id = ? AND status NOT IN ({marks})",
        (tenant_id, external_user_id, *gone_states),
    )
    return [InstanceState(**row) for row in rows]
