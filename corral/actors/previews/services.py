"""What previews need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from corral.actors.sandboxes.services import SandboxServices

if TYPE_CHECKING:
    from .access import PreviewAccess
    from .router import PreviewRouter


class PreviewServices(SandboxServices, Protocol):
    jwt_secret: str
    preview_access: PreviewAccess | None
    """Routing and token caches shared by the router and the API."""
    preview_router: PreviewRouter | None
    preview_polls: set[str]
    """Previews whose port is being polled for `sandbox.preview.ready`."""
