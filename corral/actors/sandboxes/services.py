"""What sandboxes need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from corral.actors.agents import AgentPool
from corral.actors.billing.services import BillingServices
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.actors.tenancy.services import TenancyServices
from corral.storage import BlobStore, SecretBox
from corral.vm import RuntimeDriver

from .warm_pool import WarmPool


@dataclass(frozen=True)
class SandboxTemplate:
    """A tenant's template as sandbox creation sees it (`TemplateResolver`)."""

    id: str
    """What the sandbox records as `template_id`, and the runtime template it starts from."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the new sandbox's sealed env before the sandbox's own `env`."""
    default_preview_port: int | None = None


class TemplateResolver(Protocol):
    """The templates part's answers to sandbox creation and expose (set as
    `platform.sandbox_templates`; None: tenants have only the built-in templates)."""

    async def resolve(self, platform: SandboxServices, tenant_id: str, ref: str, workspace_id: str | None) -> SandboxTemplate | None:
        """The tenant's template `ref` (id or name); None when it has none of that name or id;
        `409 TEMPLATE_NOT_READY` when it has no ready layer."""

    async def preview_port(self, platform: SandboxServices, tenant_id: str, template_id: str) -> int | None:
        """The template's default preview port (None: none, or not a tenant template)."""

    async def here(self, platform: SandboxServices, driver: RuntimeDriver, template_id: str) -> None:
        """Make sure a tenant's template (`template_id`, a sandbox's) can be made on this
        node: its layer fetched from the node that holds it when this one lacks it."""


class SandboxServices(BillingServices, TenancyServices, Protocol):
    system: ActorSystem
    runtime: RuntimeHolder
    agents: AgentPool
    secrets: SecretBox
    sandbox_templates: TemplateResolver | None
    warm_pool: WarmPool | None
    blobs: BlobStore
