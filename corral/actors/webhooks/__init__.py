"""Signed outgoing webhooks: endpoints, a durable delivery queue, retries (issue 5).

Modules, one job each:

- `events`: the specification's webhook event table and the delivery body;
- `signing`: secrets and the two signatures (`X-Service-Signature`, Standard Webhooks);
- `destinations`: HTTPS URL rules and the private-address check (create and send time);
- `spec`: validation of create and patch bodies;
- `sender`: one HTTP attempt (httpx, pinned address, no redirects, 30 s);
- `attempt`: one signed attempt for one webhook;
- `schedule`: the retry delays;
- `store`: every query of the package: webhook rows and the delivery queue (with
  leases), as frozen records (`WebhookRecord`, `DeliveryRecord`);
- `dispatcher`: bus events -> queued deliveries (with log replay after restarts);
- `worker`: claims due deliveries and sends them;
- `runtime`: the running sender, worker and dispatcher of a node (`WebhookRuntime`);
- `services`: what the package needs of its node (`WebhookServices`);
- `runner`: starts the worker and the dispatcher from the node;
- `service`: the operations the HTTP routes call.
"""

from .destinations import (
    DestinationRefused,
    InvalidUrl,
    check_destination,
    parse_url,
    refused_reason,
)
from .events import BUS_EVENT_TYPES, EVENT_TYPES, TEST_EVENT, payload, subscribed
from .runner import run_webhooks, runtime_of
from .runtime import WebhookRuntime
from .schedule import base_delay, retry_delay
from .sender import Outcome, Sender
from .service import (
    DELIVERIES_DEFAULT_LIMIT,
    DELIVERIES_MAX_LIMIT,
    MAX_WEBHOOKS_PER_TENANT,
    create_webhook,
    delete_webhook,
    delivery_public,
    find_webhook,
    list_deliveries,
    list_webhooks,
    send_test_event,
    update_webhook,
    webhook_public,
)
from .services import WebhookServices
from .signing import (
    new_secret,
    secret_preview,
    service_signature,
    signature_headers,
    standard_signature,
)
from .spec import NewWebhook, WebhookFields, parse_webhook_fields
from .store import DeliveryRecord, WebhookRecord

__all__ = [
    "BUS_EVENT_TYPES",
    "DELIVERIES_DEFAULT_LIMIT",
    "DELIVERIES_MAX_LIMIT",
    "EVENT_TYPES",
    "MAX_WEBHOOKS_PER_TENANT",
    "TEST_EVENT",
    "DeliveryRecord",
    "DestinationRefused",
    "InvalidUrl",
    "NewWebhook",
    "Outcome",
    "Sender",
    "WebhookFields",
    "WebhookRecord",
    "WebhookRuntime",
    "WebhookServices",
    "base_delay",
    "check_destination",
    "create_webhook",
    "delete_webhook",
    "delivery_public",
    "find_webhook",
    "list_deliveries",
    "list_webhooks",
    "new_secret",
    "parse_url",
    "parse_webhook_fields",
    "payload",
    "refused_reason",
    "retry_delay",
    "run_webhooks",
    "runtime_of",
    "secret_preview",
    "send_test_event",
    "service_signature",
    "signature_headers",
    "standard_signature",
    "subscribed",
    "update_webhook",
    "webhook_public",
]
