"""Webhook operations the HTTP layer calls: create, list, get, update, delete, test, deliveries.

Webhooks belong to a tenant. The secret is generated here, returned once by
`create_webhook`, and stored only encrypted (bound to tenant and webhook id); the
public form shows `secret_preview`. A destination is checked when the URL is set
(and again at every attempt, see `sender`).
"""

from __future__ import annotations

import re
from typing import Any

from corral.errors import ApiError, bad_request, invalid_id, not_found, validation_error
from corral.ids import new_ulid, prefixed
from corral.storage import utc_now_iso

from . import store
from .attempt import secret_aad, send_attempt
from .destinations import DestinationRefused, check_url_host, parse_url
from .events import EVENT_ID_PREFIX, TEST_EVENT, payload
from .runner import runtime_of
from .services import WebhookServices
from .signing import new_secret, secret_preview
from .spec import DEFAULT_RETRY_COUNT, WebhookFields
from .store import DeliveryRecord, WebhookRecord

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


def webhook_public(webhook: WebhookRecord) -> dict[str, Any]:
    return {name: getattr(webhook, name) for name in PUBLIC_FIELDS}


def delivery_public(delivery: DeliveryRecord) -> dict[str, Any]:
    return {name: getattr(delivery, name) for name in DELIVERY_FIELDS}


def webhook_not_found() -> ApiError:
    return not_found("webhook not found")


def _check_url(platform: WebhookServices, url: str) -> None:
    """422 on the `url` field when its host is an address webhooks may never reach
    (names are resolved and checked before every attempt instead)."""
    try:
        check_url_host(parse_url(url), allow_private=platform.settings.allow_private_destinations)
    except DestinationRefused as exc:
        raise validation_error({"url": str(exc)}, "webhook destination refused") from None


async def create_webhook(
    platform: WebhookServices, tenant_id: str, user_id: str | None, fields: WebhookFields
) -> tuple[WebhookRecord, str]:
    """The stored webhook and its plaintext secret (shown to the caller once)."""
    assert fields.url is not None
    _check_url(platform, fields.url)
    webhook_id = prefixed("wh")
    secret = new_secret()
    now = utc_now_iso()
    webhook = WebhookRecord(
        id=webhook_id,
        tenant_id=tenant_id,
        name=fields.name or None,
        url=fields.url,
        events=fields.events or [],
        headers=fields.headers or {},
        retry_count=DEFAULT_RETRY_COUNT if fields.retry_count is None else fields.retry_count,
        metadata=fields.metadata or {},
        secret=platform.secrets.encrypt_text(secret, secret_aad(tenant_id, webhook_id)),
        secret_preview=secret_preview(secret),
        created_by=user_id,
        created_at=now,
        updated_at=now,
    )
    await store.create_webhook(platform.db, webhook, limit=MAX_WEBHOOKS_PER_TENANT)
    return webhook, secret


async def list_webhooks(platform: WebhookServices, tenant_id: str) -> list[WebhookRecord]:
    return await store.list_webhooks(platform.db, tenant_id)


async def find_webhook(platform: WebhookServices, tenant_id: str, webhook_id: str) -> WebhookRecord:
    """The tenant's webhook; `400 INVALID_ID` for a malformed id, 404 for another tenant's."""
    if not WEBHOOK_ID.match(webhook_id):
        raise invalid_id("webhook id")
    webhook = await store.find_webhook(platform.db, tenant_id, webhook_id)
    if webhook is None:
        raise webhook_not_found()
    return webhook


async def update_webhook(platform: WebhookServices, webhook: WebhookRecord, fields: WebhookFields) -> WebhookRecord:
    """Apply the given fields; the secret never changes here."""
    changes: dict[str, Any] = {}
    if fields.url is not None and fields.url != webhook.url:
        _check_url(platform, fields.url)
        changes["url"] = fields.url
    if fields.name is not None:
        changes["name"] = fields.name or None
    if fields.events is not None:
        changes["events"] = fields.events
    if fields.headers is not None:
        changes["headers"] = fields.headers
    if fields.retry_count is not None:
        changes["retry_count"] = fields.retry_count
    if fields.metadata is not None:
        changes["metadata"] = fields.metadata
    if not changes:
        return webhook
    changes["updated_at"] = utc_now_iso()
    updated = await store.update_webhook(platform.db, webhook, changes)
    if updated is None:
        raise webhook_not_found()
    return updated


async def delete_webhook(platform: WebhookServices, webhook: WebhookRecord) -> None:
    """Remove the webhook, its queued attempts and its delivery history."""
    await store.delete_webhook(platform.db, webhook)


async def send_test_event(platform: WebhookServices, webhook: WebhookRecord) -> dict[str, Any]:
    """Send a synthetic `webhook.test` event now and wait for the answer (no retries).

    The attempt is recorded in the webhook's deliveries like any other.
    """
    now = utc_now_iso()
    event_id = EVENT_ID_PREFIX + new_ulid()
    body = payload(
        event_id=event_id,
        event_type=TEST_EVENT,
        created_at=now,
        tenant_id=webhook.tenant_id,
        data={"webhook_id": webhook.id, "message": "This is a test delivery from Corral."},
    )
    delivery = store.new_attempt(
        webhook_id=webhook.id,
        tenant_id=webhook.tenant_id,
        event_id=event_id,
        event_type=TEST_EVENT,
        payload=body,
        attempt=1,
        scheduled_at=now,
    )
    outcome = await send_attempt(
        runtime_of(platform).sender,
        platform.secrets,
        webhook,
        delivery_id=delivery.id,
        event_id=event_id,
        event_type=TEST_EVENT,
        payload=body,
    )
    if await store.webhook_exists(platform.db, webhook.id):
        await store.record_finished(platform.db, delivery, outcome, attempted_at=now)
    return {
        "delivered": outcome.delivered,
        "status_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "error": outcome.error,
        "delivery_id": delivery.id,
        "event_id": event_id,
    }


async def list_deliveries(
    platform: WebhookServices, webhook: WebhookRecord, *, limit: int, cursor: str | None = None, status: str | None = None
) -> tuple[list[DeliveryRecord], str | None]:
    """Made attempts, newest first, and the cursor of the next page (None on the last)."""
    if cursor is not None and not DELIVERY_ID.match(cursor):
        raise bad_request("INVALID_PARAM", "cursor is not a delivery id from this list")
    if status is not None and status not in store.DONE:
        raise bad_request("INVALID_PARAM", f"status must be one of {', '.join(store.DONE)}")
    attempts = await store.list_attempts(platform.db, webhook.id, limit=limit + 1, before=cursor, status=status)
    next_cursor = attempts[limit - 1].id if len(attempts) > limit else None
    return attempts[:limit], next_cursor
