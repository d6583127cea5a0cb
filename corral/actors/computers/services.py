"""What computers need of their node (see `corral.actors.tenancy.services` for why a Protocol),
and the interfaces of what the node plugs in: the metrics sampler and the agent-runs
part's profile resolver (`profiles.py` says why). This module imports nothing else of
the package, so that the package's modules can import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import trio

from corral.actors.agents import AgentPool
from corral.actors.billing.services import BillingServices
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.actors.tenancy.services import TenancyServices
from corral.storage import BlobStore, SecretBox

from .activity import Activity


class MetricsSampling(Protocol):
    """The node's sampler of computers' cgroups (`metrics.Sampler`)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


@dataclass(frozen=True)
class AgentRuntimeProfile:
    id: str
    applies_to_computers: bool = True
    env: dict[str, str] = field(default_factory=dict)
    """Stored in the computer's encrypted env store, so the instance gets it at boot."""


class ProfileResolver(Protocol):
    async def find(self, platform: ComputerServices, tenant_id: str, profile_id: str) -> AgentRuntimeProfile | None:
        """The tenant's profile `profile_id`, or None."""

    async def default_for(self, platform: ComputerServices, tenant_id: str, workspace_id: str) -> AgentRuntimeProfile | None:
        """The workspace's (else the tenant's) default profile for computers, or None."""

    async def applied(self, platform: ComputerServices, tenant_id: str, profile_id: str, computer_id: str) -> None:
        """The profile was applied to a new computer: bind its secrets to it (placeholders)."""


class ComputerServices(BillingServices, TenancyServices, Protocol):
    system: ActorSystem
    runtime: RuntimeHolder
    agents: AgentPool
    secrets: SecretBox
    blobs: BlobStore
    """Snapshots' archives, on several nodes (`snapshots.copies`)."""
    computer_activity: Activity | None
    """Commands in flight on this node (the idle watcher skips busy computers)."""
    computer_metrics: MetricsSampling | None
    agent_runtime_profiles: ProfileResolver | None
    """Set by the agent-runs part; None: tenants have no profiles."""
