"""What previews need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from corral.actors.sandboxes.services import SandboxServices
from corral.net.preview import PreviewRouter, RouteTable

from .access_cache import AccessCache


class PreviewServices(SandboxServices, Protocol):
    jwt_secret: str
    preview_access: AccessCache | None
    """Routing and token caches shared by the router and the API (a `PreviewAccess`)."""
    preview_router: PreviewRouter | None
    preview_polls: set[str]
    """Previews whose port is being polled for `sandbox.preview.ready`."""
    preview_route_plugins: list[Callable[[RouteTable], None]]
    """Parts that add their hosts to the router's table when it is built (custom domains)."""
