"""Signed outgoing webhooks: endpoints, a durable delivery queue, retries (issue 5).

Modules, one job each:

- `events`: the specification's webhook event table and the delivery body;
- `signing`: secrets and the two signatures (`X-Service-Signature`, Standard Webhooks);
- `destinations`: HTTPS URL rules and the private-address check (create and send time);
- `spec`: validation of create and patch bodies;
- `sender`: one HTTP attempt (httpx, pinned address, no redirects, 30 s);
- `attempt`: one signed attempt for one webhook;
- `schedule`: the retry delays;
- `queue`: the delivery queue in storage, with leases;
- `dispatcher`: bus events -> queued deliveries (with log replay after restarts);
- `worker`: claims due deliveries and sends them;
- `runner`: starts both from `open_platform`;
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
from .runner import WebhookRuntime, run_webhooks, runtime_of
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
from .signing import (
    new_secret,
    secret_preview,
    service_signature,
    signature_headers,
    standard_signature,
)
from .spec import NewWebhook, WebhookFields, parse_webhook_fields

__all__ = [
    "BUS_EVENT_TYPES",
    "DELIVERIES_DEFAULT_LIMIT",
    "DELIVERIES_MAX_LIMIT",
    "EVENT_TYPES",
    "MAX_WEBHOOKS_PER_TENANT",
    "TEST_EVENT",
    "DestinationRefused",
    "InvalidUrl",
    "NewWebhook",
    "Outcome",
    "Sender",
    "WebhookFields",
    "WebhookRuntime",
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
