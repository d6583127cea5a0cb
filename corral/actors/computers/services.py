"""What computers need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from corral.actors.agents import AgentPool
from corral.actors.billing.services import BillingServices
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.actors.tenancy.services import TenancyServices
from corral.storage import SecretBox

if TYPE_CHECKING:
    from .execution import Activity
    from .metrics import Sampler
    from .profiles import ProfileResolver


class ComputerServices(BillingServices, TenancyServices, Protocol):
    system: ActorSystem
    runtime: RuntimeHolder
    agents: AgentPool
    secrets: SecretBox
    computer_activity: Activity | None
    """Commands in flight on this node (the idle watcher skips busy computers)."""
    computer_metrics: Sampler | None
    agent_runtime_profiles: ProfileResolver | None
    """Set by the agent-runs part; None: tenants have no profiles."""
