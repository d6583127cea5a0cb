"""What templates need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.agents import AgentPool
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.actors.tenancy.services import TenancyServices
from corral.config import Settings
from corral.storage import BlobStore, Notices, SecretBox


class TemplateServices(TenancyServices, Protocol):
    system: ActorSystem
    runtime: RuntimeHolder
    agents: AgentPool
    secrets: SecretBox
    settings: Settings
    blobs: BlobStore
    notices: Notices
    """Other nodes hear that a template was deleted (its files go there too)."""
