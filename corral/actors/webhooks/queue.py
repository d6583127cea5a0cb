"""The delivery queue in storage: enqueue, claim with a lease, complete, release.

Each row of `webhook_deliveries` is one attempt (migration 0005). Nodes share the
queue through the store, so it survives restarts and serves several nodes on one
PostgreSQL:

- **enqueue** inserts `pending` rows with `ON CONFLICT DO NOTHING` on (webhook,
  event, attempt): replaying events after a restart cannot queue one twice.
- **claim** takes due `pending` rows whose lease is free or expired and writes this
  node's `lease_owner` and `lease_until` in one transaction (`FOR UPDATE SKIP LOCKED`
  on PostgreSQL; SQLite transactions are serialised), so only one node sends a row.
- **complete** records the outcome only while the lease is still this node's, and in
  the same transaction queues the next attempt when a retry is due.
- **release** gives a claimed row back untouched (a send cut off by shutdown).

A node that dies mid-send leaves its lease to expire (`Settings.webhook_lease_seconds`, 60 s); the row
is then claimed again, so a crash can repeat an attempt the receiver may already
have seen (same `webhook-id`), but never loses one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.ids import prefixed
from corral.storage import Database, Row, Transaction, iso_in, utc_now_iso
from corral.storage.database import insert_sql

from .sender import Outcome

DONE = ("delivered", "failed")

_COLUMNS = (
    "id", "webhook_id", "tenant_id", "event_id", "event_type", "payload", "attempt", "status",
    "scheduled_at", "created_at",
)
ENQUEUE_SQL = (
    insert_sql("webhook_deliveries", dict.fromkeys(_COLUMNS))
    + " ON CONFLICT (webhook_id, event_id, attempt) DO NOTHING"
)

DelayFor = Callable[[int, int], float | None]
"""(attempt number, retry_count) -> seconds until that attempt, or None for no attempt."""


def attempt_row(
    *, webhook_id: str, tenant_id: str, event_id: str, event_type: str, payload: str, attempt: int, scheduled_at: str
) -> Row:
    return {
        "id": prefixed("del"),
        "webhook_id": webhook_id,
        "tenant_id": tenant_id,
        "event_id": event_id,
        "event_type": event_type,
        "payload": payload,
        "attempt": attempt,
        "status": "pending",
        "scheduled_at": scheduled_at,
        "created_at": utc_now_iso(),
    }


def _enqueue(tx: Transaction, rows: list[Row]) -> int:
    return sum(max(tx.execute(ENQUEUE_SQL, tuple(row[c] for c in _COLUMNS)), 0) for row in rows)


async def enqueue(db: Database, rows: list[Row]) -> int:
    """Queue `rows`; returns how many were new."""
    if not rows:
        return 0
    return await db.transaction(lambda tx: _enqueue(tx, rows))


async def claim(db: Database, owner: str, *, limit: int, lease_seconds: float) -> list[Row]:
    """Lease up to `limit` due rows to `owner`; returns them."""

    def work(tx: Transaction) -> list[Row]:
        now = utc_now_iso()
        lock = " FOR UPDATE SKIP LOCKED" if tx.dialect == "postgresql" else ""
        candidates = tx.fetch_all(
            "SELECT id FROM webhook_deliveries WHERE status = 'pending' AND scheduled_at <= ?"
            " AND (lease_until IS NULL OR lease_until < ?) ORDER BY scheduled_at, id LIMIT ?" + lock,
            (now, now, limit),
        )
        until = iso_in(lease_seconds)
        claimed = [
            row["id"]
            for row in candidates
            if tx.execute(
                "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?"
                " AND status = 'pending' AND (lease_until IS NULL OR lease_until < ?)",
                (owner, until, row["id"], now),
            )
            == 1
        ]
        if not claimed:
            return []
        marks = ", ".join("?" for _ in claimed)
        return tx.fetch_all(f"SELECT * FROM webhook_deliveries WHERE id IN ({marks}) ORDER BY scheduled_at, id", claimed)

    return await db.transaction(work)


async def complete(
    db: Database, row: Row, owner: str, outcome: Outcome, *, attempted_at: str, delay_for: DelayFor
) -> Row | None:
    """Record `outcome` for a row `owner` holds; returns the next attempt queued, if any.

    Nothing is written (and None returned) when the lease is no longer `owner`'s or the
    webhook is gone: another node owns the row now, or there is nothing to retry for.
    """

    def work(tx: Transaction) -> Row | None:
        following: Row | None = None
        next_at: str | None = None
        if not outcome.delivered:
            retry_count = tx.fetch_value("SELECT retry_count FROM webhooks WHERE id = ?", (row["webhook_id"],))
            delay = None if retry_count is None else delay_for(int(row["attempt"]) + 1, int(retry_count))
            if delay is not None:
                next_at = iso_in(delay)
                following = attempt_row(
                    webhook_id=row["webhook_id"],
                    tenant_id=row["tenant_id"],
                    event_id=row["event_id"],
                    event_type=row["event_type"],
                    payload=row["payload"],
                    attempt=int(row["attempt"]) + 1,
                    scheduled_at=next_at,
                )
        finished = utc_now_iso()
        changed = tx.execute(
            "UPDATE webhook_deliveries SET status = ?, status_code = ?, duration_ms = ?, error = ?,"
            " attempted_at = ?, delivered_at = ?, next_attempt_at = ?, lease_owner = NULL, lease_until = NULL"
            " WHERE id = ? AND status = 'pending' AND lease_owner = ?",
            (
                "delivered" if outcome.delivered else "failed",
                outcome.status_code,
                outcome.duration_ms,
                outcome.error,
                attempted_at,
                finished if outcome.delivered else None,
                next_at,
                row["id"],
                owner,
            ),
        )
        if changed != 1:
            return None
        if following is not None:
            _enqueue(tx, [following])
        return following

    return await db.transaction(work)


async def release(db: Database, delivery_id: str, owner: str) -> None:
    """Give a claimed row back, due at once, for this or another node to send."""
    await db.execute(
        "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL"
        " WHERE id = ? AND status = 'pending' AND lease_owner = ?",
        (delivery_id, owner),
    )


async def next_due(db: Database) -> str | None:
    """When the earliest pending row becomes claimable (its schedule, or its lease's end)."""
    value = await db.fetch_value(
        "SELECT MIN(CASE WHEN lease_until IS NOT NULL AND lease_until > scheduled_at"
        " THEN lease_until ELSE scheduled_at END) AS due FROM webhook_deliveries WHERE status = 'pending'"
    )
    return None if value is None else str(value)


async def record_finished(db: Database, row: Row, outcome: Outcome, *, attempted_at: str) -> Row:
    """Store an attempt made outside the queue (the test endpoint) as already finished."""
    finished = {
        **row,
        "status": "delivered" if outcome.delivered else "failed",
        "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "error": outcome.error,
        "attempted_at": attempted_at,
        "delivered_at": utc_now_iso() if outcome.delivered else None,
        "next_attempt_at": None,
    }
    await db.insert("webhook_deliveries", finished)
    return finished


async def list_attempts(
    db: Database, webhook_id: str, *, limit: int, before: str | None = None, status: str | None = None
) -> list[Row]:
    """Made attempts of one webhook, newest first; `before` is an id cursor."""
    sql = "SELECT * FROM webhook_deliveries WHERE webhook_id = ? AND status IN ('delivered', 'failed')"
    params: list[Any] = [webhook_id]
    if status is not None:
        sql += " AND status = ?"
        params.append(status)
    if before is not None:
        sql += " AND id < ?"
        params.append(before)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    return await db.fetch_all(sql, params)


async def prune(db: Database, older_than: str) -> int:
    """Forget finished attempts created before `older_than`."""
    return await db.execute(
        "DELETE FROM webhook_deliveries WHERE status IN ('delivered', 'failed') AND created_at < ?", (older_than,)
    )
