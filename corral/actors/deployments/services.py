"""What deployments need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from corral.actors.previews.services import PreviewServices
from corral.storage import BlobStore

if TYPE_CHECKING:
    from .sites import DeploymentSites


class DeploymentServices(PreviewServices, Protocol):
    blobs: BlobStore

    @property
    def deployment_sites(self) -> DeploymentSites | None:
        """The router's table of deployment hosts (None until the node made it)."""
