"""What agent runs need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.computers.services import ComputerServices
from corral.actors.sandboxes.services import SandboxServices
from corral.net.egress import EgressProxy
from corral.storage import BlobStore, EventLog

from .profiles import RunProfiles


class AgentRunServices(SandboxServices, ComputerServices, Protocol):
    blobs: BlobStore
    """Where artifacts are kept (content-addressed)."""
    events: EventLog
    jwt_secret: str
    """Signs run tokens and artifact download URLs."""
    run_profiles: RunProfiles | None
    """Set by the profiles part; None: tenants have no profiles."""
    egress_proxy: EgressProxy | None
    """Through which a run reaches its usage endpoint (None: no usage URL is given)."""
