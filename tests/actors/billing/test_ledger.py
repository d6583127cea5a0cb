"""The ledger on SQLite and PostgreSQL: the balance is always the sum of its rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.actors.billing import ledger
from corral.actors.billing.ledger import Ledger, in_ledger
from corral.ids import new_uuid
from corral.storage import Database, migrate, open_database, parse_iso, to_iso, utc_now, utc_now_iso


async def new_tenant(db: Database) -> str:
    tenant_id = new_uuid()
    now = utc_now_iso()
    await db.insert("tenants", {"id": tenant_id, "name": "ledger test", "created_at": now, "updated_at": now})
    return tenant_id


async def check_invariants(db: Database, tenant_id: str) -> dict[str, Any]:
    """balance == sum(rows) == open lots - debt; lifetime totals match their rows; seq is 1..n."""
    account = await db.fetch_one("SELECT * FROM credit_accounts WHERE tenant_id = ?", (tenant_id,))
    assert account is not None
    rows = await db.fetch_all("SELECT * FROM credit_transactions WHERE tenant_id = ? ORDER BY seq", (tenant_id,))
    assert int(account["balance_credits"]) == sum(int(r["amount_credits"]) for r in rows)
    open_lots = sum(int(r["remaining_credits"] or 0) for r in rows if r["type"] == "earn")
    assert int(account["balance_credits"]) == open_lots - int(account["debt_credits"])
    assert int(account["debt_credits"]) >= 0
    assert all(0 <= int(r["remaining_credits"]) <= int(r["amount_credits"]) for r in rows if r["type"] == "earn")
    assert int(account["lifetime_earned"]) == sum(int(r["amount_credits"]) for r in rows if r["type"] == "earn")
    assert int(account["lifetime_spent"]) == -sum(int(r["amount_credits"]) for r in rows if r["type"] == "spend")
    assert [int(r["seq"]) for r in rows] == list(range(1, len(rows) + 1))
    assert int(account["last_seq"]) == len(rows)
    return account


operations = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(min_value=1, max_value=500)),
        st.tuples(st.just("adjust"), st.integers(min_value=1, max_value=200)),
        st.tuples(st.just("spend"), st.integers(min_value=0, max_value=300)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_concurrent_spends_and_grants_never_lose_an_update(database_url: str, ops: list[tuple[str, int]]) -> None:
    """Every operation runs at once, each in its own transaction; none may be lost.

    Synchronous, with a trio run per example: hypothesis runs many examples in one
    test, and the async `db` fixture would not outlive the first."""
    trio.run(_concurrent_operations, database_url, ops)


async def _concurrent_operations(database_url: str, ops: list[tuple[str, int]]) -> None:
    db = open_database(database_url)
    try:
        await migrate(db)
        tenant_id = await new_tenant(db)

        async def run(kind: str, amount: int) -> None:
            if kind == "grant":
                await ledger.grant(db, tenant_id, amount, "grant")
            elif kind == "adjust":
                await ledger.grant(db, tenant_id, -amount, "correction")
            else:
                await ledger.spend(db, tenant_id, amount, "usage", resource_type="widget", resource_id="w1")

        async with trio.open_nursery() as nursery:
            for kind, amount in ops:
                nursery.start_soon(run, kind, amount)

        account = await check_invariants(db, tenant_id)
        expected = sum(amount if kind == "grant" else -amount for kind, amount in ops)
        assert int(account["balance_credits"]) == expected
        count = await db.fetch_value("SELECT COUNT(*) AS n FROM credit_transactions WHERE tenant_id = ?", (tenant_id,))
        assert count == len(ops)
    finally:
        await db.close()


async def test_many_concurrent_writers_with_expiry_keep_the_sum(db: Database) -> None:
    """Grants, spends and expiries interleaved from 60 tasks; lots expire mid-way."""
    tenant_id = await new_tenant(db)
    for _ in range(5):
        await ledger.grant(db, tenant_id, 40, "early grant")
    await db.execute(
        "UPDATE credit_transactions SET expires_at = ? WHERE tenant_id = ? AND seq <= 3",
        (to_iso(utc_now() - timedelta(seconds=1)), tenant_id),
    )

    async def worker(index: int) -> None:
        for step in range(5):
            if (index + step) % 3 == 0:
                await ledger.grant(db, tenant_id, 7, "grant")
            else:
                await ledger.spend(db, tenant_id, 3, "usage")

    async with trio.open_nursery() as nursery:
        for index in range(60):
            nursery.start_soon(worker, index)
    account = await check_invariants(db, tenant_id)
    expired = await db.fetch_all("SELECT * FROM credit_transactions WHERE tenant_id = ? AND type = 'expire'", (tenant_id,))
    assert len(expired) == 3 and all(int(r["amount_credits"]) == -40 for r in expired)
    grants = sum(1 for i in range(60) for s in range(5) if (i + s) % 3 == 0)
    spends = 300 - grants
    assert int(account["balance_credits"]) == 200 - 120 + 7 * grants - 3 * spends


async def test_spends_take_the_oldest_grant_first_and_expiry_is_a_row(db: Database) -> None:
    tenant_id = await new_tenant(db)
    first, _ = await ledger.grant(db, tenant_id, 10, "first")
    second, _ = await ledger.grant(db, tenant_id, 10, "second")
    assert first.type == "earn" and first.amount_credits == 10
    await ledger.spend(db, tenant_id, 12, "usage")
    lots = {r["id"]: int(r["remaining_credits"]) for r in await db.fetch_all(
        "SELECT id, remaining_credits FROM credit_transactions WHERE type = 'earn' AND tenant_id = ?", (tenant_id,))}
    assert lots == {first.id: 0, second.id: 8}

    # The second grant's 180 days are over: its 8 unused credits leave as an `expire` row.
    await db.execute("UPDATE credit_transactions SET expires_at = ? WHERE id = ?", (to_iso(utc_now() - timedelta(seconds=1)), second.id))
    _, outcome = await in_ledger(db, tenant_id, lambda _: None)
    assert [(r.type, r.amount_credits, r.grant_id) for r in outcome.rows] == [("expire", -8, second.id)]
    account = await check_invariants(db, tenant_id)
    assert account["balance_credits"] == 0


async def test_grants_expire_180_days_after_the_grant(db: Database) -> None:
    tenant_id = await new_tenant(db)
    row, _ = await ledger.grant(db, tenant_id, 5, "grant")
    expires = row.expires_at
    assert parse_iso(expires) - parse_iso(row.inserted_at) == timedelta(days=180)


async def test_a_shortfall_is_debt_that_the_next_grant_repays(db: Database) -> None:
    tenant_id = await new_tenant(db)
    await ledger.grant(db, tenant_id, 5, "grant")
    await ledger.spend(db, tenant_id, 8, "usage")
    account = await check_invariants(db, tenant_id)
    assert (account["balance_credits"], account["debt_credits"]) == (-3, 3)
    row, _ = await ledger.grant(db, tenant_id, 10, "top-up")
    assert row.remaining_credits == 7
    account = await check_invariants(db, tenant_id)
    assert (account["balance_credits"], account["debt_credits"]) == (7, 0)


async def test_negative_grants_are_adjust_rows_and_zero_is_refused(db: Database) -> None:
    tenant_id = await new_tenant(db)
    await ledger.grant(db, tenant_id, 10, "grant")
    row, outcome = await ledger.grant(db, tenant_id, -4, "correction")
    assert (row.type, row.amount_credits, outcome.balance) == ("adjust", -4, 6)
    account = await check_invariants(db, tenant_id)
    assert account["lifetime_spent"] == 0  # corrections are not spending
    with pytest.raises(ValueError):
        await ledger.grant(db, tenant_id, 0, "nothing")


async def test_low_and_exhausted_are_announced_once_per_fall(db: Database) -> None:
    tenant_id = await new_tenant(db)
    _, outcome = await ledger.grant(db, tenant_id, 12, "grant", low_threshold=10)
    assert not outcome.low and not outcome.exhausted
    _, outcome = await ledger.spend(db, tenant_id, 3, "usage", low_threshold=10)
    assert outcome.low and not outcome.exhausted
    _, outcome = await ledger.spend(db, tenant_id, 3, "usage", low_threshold=10)
    assert not outcome.low
    _, outcome = await ledger.spend(db, tenant_id, 6, "usage", low_threshold=10)
    assert outcome.exhausted and outcome.balance == 0
    _, outcome = await ledger.spend(db, tenant_id, 0, "usage", low_threshold=10)
    assert not outcome.exhausted  # not fallen again
    await ledger.grant(db, tenant_id, 20, "top-up", low_threshold=10)
    _, outcome = await ledger.spend(db, tenant_id, 15, "usage", low_threshold=10)
    assert outcome.low and not outcome.exhausted


async def test_a_failed_transaction_leaves_no_trace(db: Database) -> None:
    tenant_id = await new_tenant(db)
    await ledger.grant(db, tenant_id, 10, "grant")

    def broken(book: Ledger) -> None:
        book.consume(4, "spend", "usage")
        raise RuntimeError("crash after the row")

    with pytest.raises(RuntimeError):
        await in_ledger(db, tenant_id, broken)
    account = await check_invariants(db, tenant_id)
    assert account["balance_credits"] == 10
