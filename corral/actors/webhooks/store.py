"""The `webhooks` and `webhook_deliveries` tables: every query of the webhooks package.

Rows come out as frozen records: `WebhookRecord` (an endpoint, JSON columns
decoded), `Subscriber` (the two columns the dispatcher matches events on) and
`DeliveryRecord` (one attempt). Reads are for anyone in the package. Each write has
one caller: the endpoint rows are written by `service` (the HTTP operations); the
delivery queue is filled by the `dispatcher` (`enqueue`), worked by the delivery
`worker` (`claim`, `complete`, `release`, `prune`), and the test endpoint's
attempt is stored by `service` (`record_finished`).

Each `webhook_deliveries` row is one attempt (migration 0005). Nodes share the
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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.actors.tenancy.store import tenants
from corral.errors import ApiError, conflict
from corral.ids import prefixed
from corral.storage import Database, Row, Transaction, iso_in, sql_identifier, utc_now_iso
from corral.storage.database import insert_sql

from .sender import Outcome

DONE = ("delivered", "failed")
"""The statuses of an attempt that was made (the others are `pending`)."""

DelayFor = Callable[[int, int], float | None]
"""(attempt number, retry_count) -> seconds until that attempt, or None for no attempt."""


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    """One webhook row (`events`, `headers`, `metadata` decoded; `secret` encrypted)."""

    id: str
    tenant_id: str
    name: str | None
    url: str
    events: list[str] = field(hash=False)
    headers: dict[str, str] = field(hash=False)
    retry_count: int
    metadata: dict[str, Any] = field(hash=False)
    secret: bytes = field(repr=False)
    secret_preview: str
    created_by: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class Subscriber:
    """What the dispatcher reads of a webhook: which events it wants."""

    id: str
    events: list[str] = field(hash=False)


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One attempt: queued (`pending`, maybe leased) or made (`delivered`, `failed`)."""

    id: str
    webhook_id: str
    tenant_id: str
    event_id: str
    event_type: str
    payload: str
    """The delivery body as sent and signed, the same bytes for every attempt."""
    attempt: int
    status: str
    scheduled_at: str
    created_at: str
    lease_owner: str | None = None
    lease_until: str | None = None
    status_code: int | None = None
    duration_ms: int | None = None
    error: str | None = None
    attempted_at: str | None = None
    delivered_at: str | None = None
    next_attempt_at: str | None = None


WEBHOOKS = RowStore("webhooks", WebhookRecord, json_columns=("events", "headers", "metadata"))
SUBSCRIBERS = RowStore("webhooks", Subscriber, json_columns=("events",))
DELIVERIES = RowStore("webhook_deliveries", DeliveryRecord)

ENQUEUE_SQL = (
    insert_sql("webhook_deliveries", dict.fromkeys(DELIVERIES.columns))
    + " ON CONFLICT (webhook_id, event_id, attempt) DO NOTHING"
)


def _first_column(rows: list[Row]) -> list[Any]:
    """The values of a one-column result, in order."""
    return [next(iter(row.values())) for row in rows]


# -- webhooks: reads ------------------------------------------------------------------


async def load_webhook(db: Database, webhook_id: str) -> WebhookRecord | None:
    return await WEBHOOKS.load(db, webhook_id)


async def find_webhook(db: Database, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
    """The tenant's webhook (None for another tenant's)."""
    row = await db.fetch_one("SELECT * FROM webhooks WHERE id = ? AND tenant_id = ?", (webhook_id, tenant_id))
    return None if row is None else WEBHOOKS.record(row)


async def webhook_exists(db: Database, webhook_id: str) -> bool:
    return await db.fetch_value("SELECT 1 FROM webhooks WHERE id = ?", (webhook_id,)) is not None


async def list_webhooks(db: Database, tenant_id: str) -> list[WebhookRecord]:
    """The tenant's webhooks, oldest first."""
    return await WEBHOOKS.where(db, [("tenant_id", tenant_id)], order_by="created_at, id")


async def subscribers(db: Database, tenant_id: str, *, created_by_then: str) -> list[Subscriber]:
    """The tenant's webhooks that existed at `created_by_then` (an event's time)."""
    rows = await db.fetch_all(
        "SELECT id, events FROM webhooks WHERE tenant_id = ? AND created_at <= ?", (tenant_id, created_by_then)
    )
    return SUBSCRIBERS.records(rows)


async def tenants_with_webhooks(db: Database) -> set[str]:
    return set(_first_column(await db.fetch_all("SELECT DISTINCT tenant_id FROM webhooks")))


# -- webhooks: writes (the HTTP operations of `service`) --------------------------------


def limit_reached(limit: int) -> ApiError:
    return conflict("WEBHOOK_LIMIT_REACHED", f"a tenant can have at most {limit} webhooks")


async def create_webhook(db: Database, record: WebhookRecord, *, limit: int) -> None:
    """Insert `record` unless its tenant already has `limit` webhooks."""

    def insert(tx: Transaction) -> None:
        tenants.lock(tx, record.tenant_id)
        count = tx.fetch_value("SELECT COUNT(*) FROM webhooks WHERE tenant_id = ?", (record.tenant_id,))
        if int(count or 0) >= limit:
            raise limit_reached(limit)
        WEBHOOKS.insert(tx, record)

    await db.transaction(insert)


async def update_webhook(db: Database, record: WebhookRecord, values: dict[str, Any]) -> WebhookRecord | None:
    """Write `values` (decoded, as in the record) into the row; None when it is gone."""
    assignments = ", ".join(f"{sql_identifier(name)} = ?" for name in values)
    updated = await db.execute(
        f"UPDATE webhooks SET {assignments} WHERE id = ? AND tenant_id = ?",
        (*WEBHOOKS.row(values).values(), record.id, record.tenant_id),
    )
    return WEBHOOKS.replaced(record, values) if updated == 1 else None


async def delete_webhook(db: Database, record: WebhookRecord) -> None:
    """The row, and with it (`ON DELETE CASCADE`) its queued attempts and delivery history."""
    await db.execute("DELETE FROM webhooks WHERE id = ? AND tenant_id = ?", (record.id, record.tenant_id))


# -- deliveries: reads ----------------------------------------------------------------


async def next_due(db: Database) -> str | None:
    """When the earliest pending row becomes claimable (its schedule, or its lease's end)."""
    value = await db.fetch_value(
        "SELECT MIN(CASE WHEN lease_until IS NOT NULL AND lease_until > scheduled_at"
        " THEN lease_until ELSE scheduled_at END) AS due FROM webhook_deliveries WHERE status = 'pending'"
    )
    return None if value is None else str(value)


async def list_attempts(
    db: Database, webhook_id: str, *, limit: int, before: str | None = None, status: str | None = None
) -> list[DeliveryRecord]:
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
    return DELIVERIES.records(await db.fetch_all(sql, params))


# -- deliveries: writes (dispatcher, worker, and the test endpoint) -------------------------


def new_attempt(
    *, webhook_id: str, tenant_id: str, event_id: str, event_type: str, payload: str, attempt: int, scheduled_at: str
) -> DeliveryRecord:
    """A `pending` attempt, not stored yet (`enqueue` stores it)."""
    return DeliveryRecord(
        id=prefixed("del"),
        webhook_id=webhook_id,
        tenant_id=tenant_id,
        event_id=event_id,
        event_type=event_type,
        payload=payload,
        attempt=attempt,
        status="pending",
        scheduled_at=scheduled_at,
        created_at=utc_now_iso(),
    )


def _enqueue(tx: Transaction, records: list[DeliveryRecord]) -> int:
    return sum(
        max(tx.execute(ENQUEUE_SQL, tuple(DELIVERIES.row(dataclasses.asdict(record)).values())), 0)
        for record in records
    )


async def enqueue(db: Database, records: list[DeliveryRecord]) -> int:
    """Queue `records`; returns how many were new."""
    if not records:
        return 0
    return await db.transaction(lambda tx: _enqueue(tx, records))


async def claim(db: Database, owner: str, *, limit: int, lease_seconds: float) -> list[DeliveryRecord]:
    """Lease up to `limit` due rows to `owner`; returns them."""

    def work(tx: Transaction) -> list[DeliveryRecord]:
        now = utc_now_iso()
        lock = " FOR UPDATE SKIP LOCKED" if tx.dialect == "postgresql" else ""
        candidates = DELIVERIES.records(
            tx.fetch_all(
                "SELECT * FROM webhook_deliveries WHERE status = 'pending' AND scheduled_at <= ?"
                " AND (lease_until IS NULL OR lease_until < ?) ORDER BY scheduled_at, id LIMIT ?" + lock,
                (now, now, limit),
            )
        )
        until = iso_in(lease_seconds)
        return [
            dataclasses.replace(record, lease_owner=owner, lease_until=until)
            for record in candidates
            if tx.execute(
                "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?"
                " AND status = 'pending' AND (lease_until IS NULL OR lease_until < ?)",
                (owner, until, record.id, now),
            )
            == 1
        ]

    return await db.transaction(work)


def _outcome_values(outcome: Outcome, *, attempted_at: str, next_attempt_at: str | None) -> dict[str, Any]:
    """The columns an attempt's outcome sets."""
    return {
        "status": "delivered" if outcome.delivered else "failed",
        "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "error": outcome.error,
        "attempted_at": attempted_at,
        "delivered_at": utc_now_iso() if outcome.delivered else None,
        "next_attempt_at": next_attempt_at,
    }


async def complete(
    db: Database, record: DeliveryRecord, owner: str, outcome: Outcome, *, attempted_at: str, delay_for: DelayFor
) -> DeliveryRecord | None:
    """Record `outcome` for a row `owner` holds; returns the next attempt queued, if any.

    Nothing is written (and None returned) when the lease is no longer `owner`'s or the
    webhook is gone: another node owns the row now, or there is nothing to retry for.
    """

    def work(tx: Transaction) -> DeliveryRecord | None:
        following: DeliveryRecord | None = None
        if not outcome.delivered:
            retry_count = tx.fetch_value("SELECT retry_count FROM webhooks WHERE id = ?", (record.webhook_id,))
            delay = None if retry_count is None else delay_for(record.attempt + 1, int(retry_count))
            if delay is not None:
                following = new_attempt(
                    webhook_id=record.webhook_id,
                    tenant_id=record.tenant_id,
                    event_id=record.event_id,
                    event_type=record.event_type,
                    payload=record.payload,
                    attempt=record.attempt + 1,
                    scheduled_at=iso_in(delay),
                )
        values = _outcome_values(
            outcome, attempted_at=attempted_at, next_attempt_at=None if following is None else following.scheduled_at
        )
        assignments = ", ".join(f"{name} = ?" for name in values)
        changed = tx.execute(
            f"UPDATE webhook_deliveries SET {assignments}, lease_owner = NULL, lease_until = NULL"
            " WHERE id = ? AND status = 'pending' AND lease_owner = ?",
            (*values.values(), record.id, owner),
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


async def record_finished(
    db: Database, record: DeliveryRecord, outcome: Outcome, *, attempted_at: str
) -> DeliveryRecord:
    """Store an attempt made outside the queue (the test endpoint) as already finished."""
    finished = DELIVERIES.replaced(record, _outcome_values(outcome, attempted_at=attempted_at, next_attempt_at=None))
    await db.transaction(lambda tx: DELIVERIES.insert(tx, finished))
    return finished


async def prune(db: Database, older_than: str) -> int:
    """Forget finished attempts created before `older_than`."""
    return await db.execute(
        "DELETE FROM webhook_deliveries WHERE status IN ('delivered', 'failed') AND created_at < ?", (older_than,)
    )
