"""What webhooks need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.bus import EventBus
from corral.config import Settings
from corral.storage import Database, EventLog, SecretBox

from .runtime import WebhookRuntime


class WebhookServices(Protocol):
    settings: Settings
    db: Database
    bus: EventBus
    events: EventLog
    secrets: SecretBox
    webhooks: WebhookRuntime | None
    """This node's sender, delivery worker and dispatcher, once started."""
