"""What the egress package needs of its node: the store, the secret box and the bus."""

from __future__ import annotations

from typing import Protocol

from corral.actors.bus import EventBus
from corral.storage import Database, SecretBox


class EgressServices(Protocol):
    db: Database
    secrets: SecretBox
    bus: EventBus
