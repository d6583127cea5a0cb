"""What previews need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from corral.actors.sandboxes.services import SandboxServices
from corral.net.preview import Decision, PreviewRequest, PreviewRouter, RouteTable
from corral.storage import Notices

from .access_cache import AccessCache


class HostSites(Protocol):
    """Deployments' hosts as the router asks them (`corral.actors.deployments.DeploymentSites`):
    the answer for `{slug}.{domain}` / `v{n}-{slug}.{domain}`, or None when no deployment has it."""

    async def resolve(self, request: PreviewRequest, match: re.Match[str] | None) -> Decision | None: ...


class PreviewServices(SandboxServices, Protocol):
    jwt_secret: str
    notices: Notices
    """How the other nodes hear of changes to the router's tables that have no event."""
    preview_access: AccessCache | None
    """Routing and token caches shared by the router and the API (a `PreviewAccess`)."""
    preview_router: PreviewRouter | None
    preview_polls: set[str]
    """Previews whose port is being polled for `sandbox.preview.ready`."""
    preview_route_plugins: list[Callable[[RouteTable], None]]
    """Parts that add their hosts to the router's table when it is built (custom domains)."""

    @property
    def deployment_sites(self) -> HostSites | None:
        """Set by the node once deployments are routed (None before)."""
