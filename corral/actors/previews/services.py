"""What previews need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.sandboxes.services import SandboxServices
from corral.net.preview import PreviewRouter

from .access_cache import AccessCache


class PreviewServices(SandboxServices, Protocol):
    jwt_secret: str
    preview_access: AccessCache | None
    """Routing and token caches shared by the router and the API (a `PreviewAccess`)."""
    preview_router: PreviewRouter | None
    preview_polls: set[str]
    """Previews whose port is being polled for `sandbox.preview.ready`."""
