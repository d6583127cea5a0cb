"""The platform: the long-lived services of one Corral node, as one object, every one typed.

`corral.node.open_node(settings)`, the composition root, builds and starts it: the
store and its migrations, the secret box, the bootstrap admin key, the JWT signing
secret, the actor system with its event bus, and every part. The HTTP layer and
integration tests receive the same `Platform`, so tests can drive actors directly.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from corral.actors.agents import AgentPool
from corral.actors.bus import EventBus
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.config import Settings
from corral.storage import Database, EventLog, SecretBox

if TYPE_CHECKING:  # the parts' own services, built by the node; no part imports another through here
    from corral.actors.billing.metering import Metering
    from corral.actors.computers.execution import Activity
    from corral.actors.computers.metrics import Sampler
    from corral.actors.computers.profiles import ProfileResolver
    from corral.actors.previews.access import PreviewAccess
    from corral.actors.previews.router import PreviewRouter
    from corral.actors.webhooks.runner import WebhookRuntime


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
    # Services of the parts, typed; the node sets each one explicitly.
    metering: Metering | None = None
    """The running metering task (None before the node started billing, and after it stopped)."""
    computer_activity: Activity | None = None
    """Computer commands in flight on this node (the idle watcher skips busy computers)."""
    computer_metrics: Sampler | None = None
    agent_runtime_profiles: ProfileResolver | None = None
    """Registered by the agent-runs part; None: tenants have no profiles."""
    preview_access: PreviewAccess | None = None
    """Routing and token caches shared by the preview router and the API."""
    preview_router: PreviewRouter | None = None
    preview_polls: set[str] = field(default_factory=set)
    """Previews whose port is being polled for `sandbox.preview.ready`."""
    webhooks: WebhookRuntime | None = None
    """The webhook sender, delivery worker and dispatcher of this node."""

    def is_bootstrap_admin_key(self, token: str) -> bool:
        candidate = hashlib.sha256(token.encode()).hexdigest()
        return hmac.compare_digest(candidate, self.admin_key_digest)
