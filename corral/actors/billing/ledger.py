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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from corral.ids import new_uuid
from corral.storage import Database, Transaction, to_iso, utc_now

from . import store
from .pricing import CREDIT_EXPIRY_DAYS, MICRO
from .store import AccountRecord, TransactionRecord

T = TypeVar("T")

ROW_TYPES = ("earn", "spend", "adjust", "expire")
"""`earn`: a positive operator grant; `spend`: metered compute or AI usage;
`adjust`: a negative operator correction; `expire`: credits of a grant that expired."""

_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(TransactionRecord))


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
    rows: list[TransactionRecord] = field(default_factory=list)


class Ledger:
    """One tenant's ledger inside an open transaction, its account row locked.

    Constructing it creates the account if needed, locks it and posts any expiry
    that has come due, so every operation sees an up-to-date balance. `account` is
    the account as this transaction has changed it so far; `close` writes it back."""

    def __init__(self, tx: Transaction, tenant_id: str, now: datetime | None = None) -> None:
        self.tx = tx
        self.tenant_id = tenant_id
        self.now = now or utc_now()
        self.now_iso = to_iso(self.now)
        self.account: AccountRecord = store.lock_account(tx, tenant_id, self.now_iso)
        self.before = self.account.balance_credits
        self.rows: list[TransactionRecord] = []
        self.expire_due()

    @property
    def balance(self) -> int:
        return self.account.balance_credits

    def _change(self, **values: Any) -> None:
        self.account = dataclasses.replace(self.account, **values)

    def post(self, type_: str, amount: int, description: str, **fields: Any) -> TransactionRecord:
        """Append one row and move the balance by `amount` (positive earns, negative spends)."""
        if type_ not in ROW_TYPES:
            raise ValueError(f"unknown ledger row type {type_!r}")
        unknown = set(fields) - _ROW_FIELDS
        if unknown:
            raise TypeError(f"unknown ledger fields: {sorted(unknown)}")
        self._change(last_seq=self.account.last_seq + 1)
        values: dict[str, Any] = {
            "id": new_uuid(),
            "tenant_id": self.tenant_id,
            "seq": self.account.last_seq,
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
        row = TransactionRecord(**{**values, **fields})
        store.insert_transaction(self.tx, row)
        self._change(balance_credits=self.balance + amount)
        self.rows.append(row)
        return row

    def earn(self, amount: int, description: str, **fields: Any) -> TransactionRecord:
        """A grant: a lot of `amount` credits expiring in 180 days; it repays any debt first."""
        if amount <= 0:
            raise ValueError("a grant must be positive")
        debt = self.account.debt_credits
        repaid = min(debt, amount)
        self._change(debt_credits=debt - repaid, lifetime_earned=self.account.lifetime_earned + amount)
        expires = to_iso(self.now + timedelta(days=CREDIT_EXPIRY_DAYS))
        return self.post("earn", amount, description, expires_at=expires, remaining_credits=amount - repaid, **fields)

    def consume(self, amount: int, type_: str, description: str, **fields: Any) -> TransactionRecord:
        """Take `amount` (>= 0) credits from the open lots, oldest first; any shortfall is debt."""
        if amount < 0:
            raise ValueError("consume a non-negative amount")
        row = self.post(type_, -amount, description, **fields)
        if type_ == "spend":
            self._change(lifetime_spent=self.account.lifetime_spent + amount)
        left = amount
        if left:
            for lot in store.open_lots(self.tx, self.tenant_id, self.now_iso, expired=False):
                take = min(left, lot.remaining_credits or 0)
                store.take_from_lot(self.tx, lot.id, take)
                left -= take
                if not left:
                    break
        self._change(debt_credits=self.account.debt_credits + left)
        return row

    def add_ai_usage(self, micro: int) -> int:
        """Carry `micro` millionths of a credit of AI usage on the account; the whole
        credits the carry now makes leave it, for the caller to post."""
        whole, carry = divmod(self.account.ai_carry_micro + micro, MICRO)
        self._change(ai_carry_micro=carry)
        return whole

    def expire_due(self) -> None:
        """Post an `expire` row for every lot whose 180 days are over, oldest first."""
        for lot in store.open_lots(self.tx, self.tenant_id, self.now_iso, expired=True):
            remaining = lot.remaining_credits or 0
            store.empty_lot(self.tx, lot.id)
            self.post("expire", -remaining, "unused granted credits expired", grant_id=lot.id)

    def close(self, low_threshold: int) -> Outcome:
        """Write the account row back; decide which balance events the change calls for."""
        balance, account = self.balance, self.account
        outcome = Outcome(self.tenant_id, self.before, balance, low_threshold=low_threshold, rows=self.rows)
        fell = balance < self.before
        low_notified, exhausted_notified = account.low_notified, account.exhausted_notified
        if fell and balance < low_threshold and not low_notified:
            outcome.low, low_notified = True, 1
        elif balance >= low_threshold:
            low_notified = 0
        if fell and balance <= 0 and not exhausted_notified:
            outcome.exhausted, exhausted_notified = True, 1
        elif balance > 0:
            exhausted_notified = 0
        self._change(
            low_notified=low_notified,
            exhausted_notified=exhausted_notified,
            updated_at=self.now_iso if (self.rows or balance != self.before) else account.updated_at,
        )
        store.write_account(self.tx, self.account)
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
) -> tuple[TransactionRecord, Outcome]:
    """An operator grant: `earn` when positive, an `adjust` row (consuming lots) when negative."""
    if amount == 0:
        raise ValueError("a grant of zero credits")

    def work(ledger: Ledger) -> TransactionRecord:
        if amount > 0:
            return ledger.earn(amount, description, user_id=user_id)
        return ledger.consume(-amount, "adjust", description, user_id=user_id)

    return await in_ledger(db, tenant_id, work, low_threshold=low_threshold)


async def spend(
    db: Database, tenant_id: str, amount: int, description: str, *, low_threshold: int = 0, **fields: Any
) -> tuple[TransactionRecord, Outcome]:
    """A `spend` row of `amount` (>= 0) credits with its attribution `fields`."""
    return await in_ledger(
        db, tenant_id, lambda ledger: ledger.consume(amount, "spend", description, **fields), low_threshold=low_threshold
    )


async def expire_due(db: Database, *, low_threshold: int = 0) -> list[Outcome]:
    """Post every expiry that has come due, tenant by tenant."""
    outcomes = []
    for tenant_id in await store.tenants_with_expiry_due(db, to_iso(utc_now())):
        _, outcome = await in_ledger(db, tenant_id, lambda ledger: None, low_threshold=low_threshold)
        outcomes.append(outcome)
    return outcomes
