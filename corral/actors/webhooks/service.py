"""Webhook operations the HTTP layer calls: create, list, get, update, delete, test, deliveries.

Webhooks belong to a tenant. The secret is generated here, returned once by
`create_webhook`, and stored only encrypted (bound to tenant and webhook id); the
public form shows `secret_preview`. A destination is checked when the URL is set
(and again at every attempt, see `sender`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from corral.errors import ApiError, bad_request, conflict, invalid_id, not_found, validation_error
from corral.ids import new_ulid, prefixed
from corral.storage import Row, Transaction, utc_now_iso

from . import queue
from .attempt import secret_aad, send_attempt
from .destinations import DestinationRefused, check_url_host, parse_url
from .events import EVENT_ID_PREFIX, TEST_EVENT, payload
from .runner import runtime_of
from .signing import new_secret, secret_preview
from .spec import DEFAULT_RETRY_COUNT, WebhookFields

if TYPE_CHECKING:
    from corral.actors.webhooks.services import WebhookServices

MAX_WEBHOOKS_PER_TENANT = 100
DELIVERIES_DEFAULT_LIMIT = 100
DELIVERIES_MAX_LIMIT = 1000

_ULID = "[0-9a-hjkmnp-tv-z]{26}"
WEBHOOK_ID = re.compile(f"^wh_{_ULID}$")
DELIVERY_ID = re.compile(f"^del_{_ULID}$")

PUBLIC_FIELDS = ("id", "name", "url", "events", "headers", "retry_count", "metadata", "secret_preview", "created_at", "updated_at")
DELIVERY_FIELDS = (
    "id", "webhook_id", "event_id", "event_type", "status", "status_code", "attempt", "duration_ms", "error",
    "attempted_at", "delivered_at", "next_attempt_at", "created_at",
)
JSON_FIELDS = ("events", "headers", "metadata")


def webhook_public(row: Row) -> dict[str, Any]:
    record = {name: row[name] for name in PUBLIC_FIELDS}
    for name in JSON_FIELDS:
        record[name] = json.loads(row[name])
    return record


def delivery_public(row: Row) -> dict[str, Any]:
    return {name: row[name] for name in DELIVERY_FIELDS}


def webhook_not_found() -> ApiError:
    return not_found("webhook not found")


def _check_url(platform: WebhookServices, url: str) -> None:
    """422 on the `url` field when its host is an address webhooks may never reach
    (names are resolved and checked before every attempt instead)."""
    try:
        check_url_host(parse_url(url), allow_private=platform.settings.allow_private_destinations)
    except DestinationRefused as exc:
        raise validation_error({"url": str(exc)}, "webhook destination refused") from None


async def create_webhook(platform: WebhookServices, tenant_id: str, user_id: str | None, fields: WebhookFields) -> tuple[Row, str]:
    """The stored webhook and its plaintext secret (shown to the caller once)."""
    assert fields.url is not None
    _check_url(platform, fields.url)
    webhook_id = prefixed("wh")
    secret = new_secret()
    now = utc_now_iso()
    row: Row = {
        "id": webhook_id,
        "tenant_id": tenant_id,
        "name": fields.name or None,
        "url": fields.url,
        "events": json.dumps(fields.events or []),
        "headers": json.dumps(fields.headers or {}),
        "retry_count": DEFAULT_RETRY_COUNT if fields.retry_count is None else fields.retry_count,
        "metadata": json.dumps(fields.metadata or {}),
        "secret": platform.secrets.encrypt_text(secret, secret_aad(tenant_id, webhook_id)),
        "secret_preview": secret_preview(secret),
        "created_by": user_id,
        "created_at": now,
        "updated_at": now,
    }

    def insert(tx: Transaction) -> None:
        count = tx.fetch_value("SELECT COUNT(*) FROM webhooks WHERE tenant_id = ?", (tenant_id,))
        if int(count or 0) >= MAX_WEBHOOKS_PER_TENANT:
            raise conflict("WEBHOOK_LIMIT_REACHED", f"a tenant can have at most {MAX_WEBHOOKS_PER_TENANT} webhooks")
        tx.insert("webhooks", row)

    await platform.db.transaction(insert)
    return row, secret


async def list_webhooks(platform: WebhookServices, tenant_id: str) -> list[Row]:
    return await platform.db.fetch_all(
        "SELECT * FROM webhooks WHERE tenant_id = ? ORDER BY created_at, id", (tenant_id,)
    )


async def find_webhook(platform: WebhookServices, tenant_id: str, webhook_id: str) -> Row:
    """The tenant's webhook; `400 INVALID_ID` for a malformed id, 404 for another tenant's."""
    if not WEBHOOK_ID.match(webhook_id):
        raise invalid_id("webhook id")
    row = await platform.db.fetch_one(
        "SELECT * FROM webhooks WHERE id = ? AND tenant_id = ?", (webhook_id, tenant_id)
    )
    if row is None:
        raise webhook_not_found()
    return row


async def update_webhook(platform: WebhookServices, row: Row, fields: WebhookFields) -> Row:
    """Apply the given fields; the secret never changes here."""
    changes: dict[str, Any] = {}
    if fields.url is not None and fields.url != row["url"]:
        _check_url(platform, fields.url)
        changes["url"] = fields.url
    if fields.name is not None:
        changes["name"] = fields.name or None
    if fields.events is not None:
        changes["events"] = json.dumps(fields.events)
    if fields.headers is not None:
        changes["headers"] = json.dumps(fields.headers)
    if fields.retry_count is not None:
        changes["retry_count"] = fields.retry_count
    if fields.metadata is not None:
        changes["metadata"] = json.dumps(fields.metadata)
    if not changes:
        return row
    changes["updated_at"] = utc_now_iso()
    assignments = ", ".join(f"{name} = ?" for name in changes)
    updated = await platform.db.execute(
        f"UPDATE webhooks SET {assignments} WHERE id = ? AND tenant_id = ?",
        (*changes.values(), row["id"], row["tenant_id"]),
    )
    if updated != 1:
        raise webhook_not_found()
    return {**row, **changes}


async def delete_webhook(platform: WebhookServices, row: Row) -> None:
    """Remove the webhook, its queued attempts and its delivery history."""
    await platform.db.execute("DELETE FROM webhooks WHERE id = ? AND tenant_id = ?", (row["id"], row["tenant_id"]))


async def send_test_event(platform: WebhookServices, row: Row) -> dict[str, Any]:
    """Send a synthetic `webhook.test` event now and wait for the answer (no retries).

    The attempt is recorded in the webhook's deliveries like any other.
    """
    now = utc_now_iso()
    event_id = EVENT_ID_PREFIX + new_ulid()
    body = payload(
        event_id=event_id,
        event_type=TEST_EVENT,
        created_at=now,
        tenant_id=row["tenant_id"],
        data={"webhook_id": row["id"], "message": "This is a test delivery from Corral."},
    )
    delivery = queue.attempt_row(
        webhook_id=row["id"],
        tenant_id=row["tenant_id"],
        event_id=event_id,
        event_type=TEST_EVENT,
        payload=body,
        attempt=1,
        scheduled_at=now,
    )
    outcome = await send_attempt(
        runtime_of(platform).sender,
        platform.secrets,
        row,
        delivery_id=delivery["id"],
        event_id=event_id,
        event_type=TEST_EVENT,
        payload=body,
    )
    if await platform.db.fetch_value("SELECT 1 FROM webhooks WHERE id = ?", (row["id"],)) is not None:
        await queue.record_finished(platform.db, delivery, outcome, attempted_at=now)
    return {
        "delivered": outcome.delivered,
        "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "error": outcome.error,
        "delivery_id": delivery["id"],
        "event_id": event_id,
    }


async def list_deliveries(
    platform: WebhookServices, row: Row, *, limit: int, cursor: str | None = None, status: str | None = None
) -> tuple[list[Row], str | None]:
    """Made attempts, newest first, and the cursor of the next page (None on the last)."""
    if cursor is not None and not DELIVERY_ID.match(cursor):
        raise bad_request("INVALID_PARAM", "cursor is not a delivery id from this list")
    if status is not None and status not in queue.DONE:
        raise bad_request("INVALID_PARAM", f"status must be one of {', '.join(queue.DONE)}")
    rows = await queue.list_attempts(platform.db, row["id"], limit=limit + 1, before=cursor, status=status)
    next_cursor = rows[limit - 1]["id"] if len(rows) > limit else None
    return rows[:limit], next_cursor
