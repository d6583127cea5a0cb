"""The specification's webhook event table, and the body of one delivery (contract §5).

Only the types of this table reach webhooks; the bus carries many more (exec line
events, `sandbox.started`, ...) that stay on SSE streams. A webhook subscribed with
`events: []` (or none) receives every type listed here.
"""

from __future__ import annotations

import json
from typing import Any

from corral.storage import Event

EVENT_TYPES: tuple[str, ...] = (
    "sandbox.created",
    "sandbox.ready",
    "sandbox.error",
    "sandbox.destroyed",
    "computer.created",
    "computer.running",
    "computer.stopped",
    "computer.deleted",
    "deployment.succeeded",
    "deployment.failed",
    "deployment.rollback",
    "billing.credit_low",
    "billing.credit_exhausted",
    "webhook.test",
)

TEST_EVENT = "webhook.test"

BUS_EVENT_TYPES: tuple[str, ...] = tuple(t for t in EVENT_TYPES if t != TEST_EVENT)
"""What the dispatcher takes from the bus; `webhook.test` is only sent by the test endpoint."""

EVENT_ID_PREFIX = "evt_"


def event_id_of(event: Event) -> str:
    """`evt_<ulid>` from the event log's id: the same for every attempt and every node."""
    return EVENT_ID_PREFIX + event.id


def subscribed(events: list[str], event_type: str) -> bool:
    """An empty list subscribes to every type of the table."""
    return event_type in events if events else event_type in EVENT_TYPES


def payload(*, event_id: str, event_type: str, created_at: str, tenant_id: str, data: dict[str, Any]) -> str:
    """The delivery body `{id, type, created_at, tenant_id, data}` as compact JSON text.

    It is built once, when the delivery is queued, and stored: every attempt sends
    (and signs) exactly the same bytes.
    """
    body = {"id": event_id, "type": event_type, "created_at": created_at, "tenant_id": tenant_id, "data": data}
    return json.dumps(body, separators=(",", ":"), sort_keys=False, default=str)


def payload_of(event: Event) -> str:
    assert event.tenant_id is not None
    return payload(
        event_id=event_id_of(event),
        event_type=event.type,
        created_at=event.created_at,
        tenant_id=event.tenant_id,
        data=event.data,
    )
