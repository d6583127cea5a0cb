"""The platform: the long-lived services of one Corral node, as one object.

`corral.node.open_node(settings)`, the composition root, builds and starts it: the
store and its migrations, the secret box, the bootstrap admin key, the JWT signing
secret, the actor system with its event bus, and every part. The HTTP layer and
integration tests receive the same `Platform`, so tests can drive actors directly.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

import trio

from corral.actors.agents import AgentPool
from corral.actors.bus import EventBus
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.config import Settings
from corral.storage import Database, EventLog, SecretBox


@dataclass
class Platform:
    settings: Settings
    db: Database
    events: EventLog
    secrets: SecretBox
    jwt_secret: str
    admin_key_digest: str
    nursery: trio.Nursery
    bus: EventBus
    runtime: RuntimeHolder
    agents: AgentPool
    system: ActorSystem = field(init=False)
    """The actor system; its actors see this platform as `self.services`."""
    extensions: dict[str, Any] = field(default_factory=dict)
    """Optional services registered by later parts (credits, runtime driver, ...)."""

    def is_bootstrap_admin_key(self, token: str) -> bool:
        candidate = hashlib.sha256(token.encode()).hexdigest()
        return hmac.compare_digest(candidate, self.admin_key_digest)
