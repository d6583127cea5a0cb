"""The credits ledger: rows that always add up to the balance.

Every change to a tenant's credits happens inside one database transaction that
first locks the tenant's `credit_accounts` row (`SELECT ... FOR UPDATE` on
PostgreSQL; SQLite serialises every write transaction), then adds ledger rows and
writes the new balance in the same transaction. Two concurrent spends or grants
therefore queue on the lock instead of overwriting each other's balance, and the
balance equals the sum of `amount_credits` of the tenant's rows at every commit.

Grants (`earn`) are lots that expire `CREDIT_EXPIRY_DAYS` after the grant; spends
consume the open lots oldest first (`remaining_credits`). When a lot expires with
credits left, an `expire` row takes them out, so expiry is itself a row. A spend
larger than the open lots leaves a debt that the next grant repays first; hence
also `balance == sum(remaining of open lots) - debt`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from corral.ids import new_uuid
from corral.storage import Database, Row, Transaction, to_iso, utc_now

from .pricing import CREDIT_EXPIRY_DAYS

T = TypeVar("T")

ROW_TYPES = ("earn", "spend", "adjust", "expire")
"""`earn`: a positive operator grant; `spend`: metered compute or AI usage;
`adjust`: a negative operator correction; `expire`: credits of a grant that expired."""

_OPEN_LOTS = (
    "SELECT id, remaining_credits FROM credit_transactions"
    " WHERE tenant_id = ? AND type = 'earn' AND remaining_credits > 0 AND expires_at {op} ?"
    " ORDER BY expires_at, seq"
)


@dataclass
class Outcome:
    """What a ledger transaction did to a tenant's balance, and what it must announce."""

    tenant_id: str
    before: int
    balance: int
    low: bool = False
    """The balance fell below the low threshold (publish `billing.credit_low`)."""
    exhausted: bool = False
    """The balance fell to zero or below (publish `billing.credit_exhausted`, stop instances)."""
    low_threshold: int = 0
    rows: list[Row] = field(default_factory=list)


class Ledger:
    """One tenant's ledger inside an open transaction, its account row locked.

    Constructing it creates the account if needed, locks it and posts any expiry
    that has come due, so every operation sees an up-to-date balance."""

    def __init__(self, tx: Transaction, tenant_id: str, now: datetime | None = None) -> None:
        self.tx = tx
        self.tenant_id = tenant_id
        self.now = now or utc_now()
        self.now_iso = to_iso(self.now)
        tx.execute(
            "INSERT INTO credit_accounts (tenant_id, created_at, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (tenant_id) DO NOTHING",
            (tenant_id, self.now_iso, self.now_iso),
        )
        lock = " FOR UPDATE" if tx.dialect == "postgresql" else ""
        account = tx.fetch_one(f"SELECT * FROM credit_accounts WHERE tenant_id = ?{lock}", (tenant_id,))
        assert account is not None
        self.account: Row = account
        self.before = int(account["balance_credits"])
        self.rows: list[Row] = []
        self.expire_due()

    @property
    def balance(self) -> int:
        return int(self.account["balance_credits"])

    def post(self, type_: str, amount: int, description: str, **fields: Any) -> Row:
        """Append one row and move the balance by `amount` (positive earns, negative spends)."""
        if type_ not in ROW_TYPES:
            raise ValueError(f"unknown ledger row type {type_!r}")
        self.account["last_seq"] = int(self.account["last_seq"]) + 1
        row: Row = {
            "id": new_uuid(),
            "tenant_id": self.tenant_id,
            "seq": self.account["last_seq"],
            "type": type_,
            "amount_credits": amount,
            "description": description,
            "user_id": None,
            "computer_id": None,
            "resource_type": None,
            "resource_id": None,
            "external_user_id": None,
            "size": None,
            "provider": None,
            "model": None,
            "input_tokens": None,
            "output_tokens": None,
            "cost_usd_micros": 0,
            "grant_id": None,
            "expires_at": None,
            "remaining_credits": None,
            "inserted_at": self.now_iso,
        }
        unknown = set(fields) - set(row)
        if unknown:
            raise TypeError(f"unknown ledger fields: {sorted(unknown)}")
        row.update(fields)
        self.tx.insert("credit_transactions", row)
        self.account["balance_credits"] = self.balance + amount
        self.rows.append(row)
        return row

    def earn(self, amount: int, description: str, **fields: Any) -> Row:
        """A grant: a lot of `amount` credits expiring in 180 days; it repays any debt first."""
        if amount <= 0:
            raise ValueError("a grant must be positive")
        debt = int(self.account["debt_credits"])
        repaid = min(debt, amount)
        self.account["debt_credits"] = debt - repaid
        self.account["lifetime_earned"] = int(self.account["lifetime_earned"]) + amount
        expires = to_iso(self.now + timedelta(days=CREDIT_EXPIRY_DAYS))
        return self.post("earn", amount, description, expires_at=expires, remaining_credits=amount - repaid, **fields)

    def consume(self, amount: int, type_: str, description: str, **fields: Any) -> Row:
        """Take `amount` (>= 0) credits from the open lots, oldest first; any shortfall is debt."""
        if amount < 0:
            raise ValueError("consume a non-negative amount")
        row = self.post(type_, -amount, description, **fields)
        if type_ == "spend":
            self.account["lifetime_spent"] = int(self.account["lifetime_spent"]) + amount
        left = amount
        if left:
            for lot in self.tx.fetch_all(_OPEN_LOTS.format(op=">"), (self.tenant_id, self.now_iso)):
                take = min(left, int(lot["remaining_credits"]))
                self.tx.execute(
                    "UPDATE credit_transactions SET remaining_credits = remaining_credits - ? WHERE id = ?",
                    (take, lot["id"]),
                )
                left -= take
                if not left:
                    break
        self.account["debt_credits"] = int(self.account["debt_credits"]) + left
        return row

    def expire_due(self) -> None:
        """Post an `expire` row for every lot whose 180 days are over, oldest first."""
        for lot in self.tx.fetch_all(_OPEN_LOTS.format(op="<="), (self.tenant_id, self.now_iso)):
            remaining = int(lot["remaining_credits"])
            self.tx.execute("UPDATE credit_transactions SET remaining_credits = 0 WHERE id = ?", (lot["id"],))
            self.post("expire", -remaining, "unused granted credits expired", grant_id=lot["id"])

    def close(self, low_threshold: int) -> Outcome:
        """Write the account row back; decide which balance events the change calls for."""
        balance, account = self.balance, self.account
        outcome = Outcome(self.tenant_id, self.before, balance, low_threshold=low_threshold, rows=self.rows)
        fell = balance < self.before
        if fell and balance < low_threshold and not account["low_notified"]:
            outcome.low, account["low_notified"] = True, 1
        elif balance >= low_threshold:
            account["low_notified"] = 0
        if fell and balance <= 0 and not account["exhausted_notified"]:
            outcome.exhausted, account["exhausted_notified"] = True, 1
        elif balance > 0:
            account["exhausted_notified"] = 0
        self.tx.execute(
            "UPDATE credit_accounts SET balance_credits = ?, lifetime_earned = ?, lifetime_spent = ?,"
            " debt_credits = ?, ai_carry_micro = ?, last_seq = ?, low_notified = ?, exhausted_notified = ?,"
            " updated_at = ? WHERE tenant_id = ?",
            (
                balance,
                account["lifetime_earned"],
                account["lifetime_spent"],
                account["debt_credits"],
                account["ai_carry_micro"],
                account["last_seq"],
                account["low_notified"],
                account["exhausted_notified"],
                self.now_iso if (self.rows or balance != self.before) else account["updated_at"],
                self.tenant_id,
            ),
        )
        return outcome


async def in_ledger(
    db: Database, tenant_id: str, work: Callable[[Ledger], T], *, low_threshold: int = 0
) -> tuple[T, Outcome]:
    """Run `work(ledger)` in one transaction with the tenant's account locked."""

    def run(tx: Transaction) -> tuple[T, Outcome]:
        ledger = Ledger(tx, tenant_id)
        result = work(ledger)
        return result, ledger.close(low_threshold)

    return await db.transaction(run)


async def grant(
    db: Database, tenant_id: str, amount: int, description: str, *, user_id: str | None = None, low_threshold: int = 0
) -> tuple[Row, Outcome]:
    """An operator grant: `earn` when positive, an `adjust` row (consuming lots) when negative."""
    if amount == 0:
        raise ValueError("a grant of zero credits")

    def work(ledger: Ledger) -> Row:
        if amount > 0:
            return ledger.earn(amount, description, user_id=user_id)
        return ledger.consume(-amount, "adjust", description, user_id=user_id)

    return await in_ledger(db, tenant_id, work, low_threshold=low_threshold)


async def spend(
    db: Database, tenant_id: str, amount: int, description: str, *, low_threshold: int = 0, **fields: Any
) -> tuple[Row, Outcome]:
    """A `spend` row of `amount` (>= 0) credits with its attribution `fields`."""
    return await in_ledger(
        db, tenant_id, lambda ledger: ledger.consume(amount, "spend", description, **fields), low_threshold=low_threshold
    )


async def expire_due(db: Database, *, low_threshold: int = 0) -> list[Outcome]:
    """Post every expiry that has come due, tenant by tenant."""
    rows = await db.fetch_all(
        "SELECT DISTINCT tenant_id FROM credit_transactions"
        " WHERE type = 'earn' AND remaining_credits > 0 AND expires_at <= ?",
        (to_iso(utc_now()),),
    )
    outcomes = []
    for row in rows:
        _, outcome = await in_ledger(db, row["tenant_id"], lambda ledger: None, low_threshold=low_threshold)
        outcomes.append(outcome)
    return outcomes
