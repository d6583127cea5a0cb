"""What the egress package needs of its node: the store, the secret box, the bus and settings."""

from __future__ import annotations

from typing import Protocol

from corral.actors.bus import EventBus
from corral.config import Settings
from corral.storage import Database, SecretBox


class EgressServices(Protocol):
    db: Database
    secrets: SecretBox
    bus: EventBus
    settings: Settings
