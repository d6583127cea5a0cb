"""What custom domains need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from corral.actors.computers.services import ComputerServices
from corral.net.preview import RouteTable
from corral.storage import Notices

from .routing_map import DomainMap
from .targets import DeploymentHosts


class CustomDomainServices(ComputerServices, Protocol):
    notices: Notices
    """Preview domains changed on another node: the TLS edge's index reads them again."""
    custom_domains: DomainMap
    """The node's domains in memory, for the router and the TLS edge's question."""

    @property
    def deployment_sites(self) -> DeploymentHosts | None:
        """The deployments part's hosts (None before it routes any): the TLS edge asks it."""
    preview_route_plugins: list[Callable[[RouteTable], None]]
    """Where the custom domains' plug-in for the preview router is registered."""
