"""Custom domains of computers and deployments, and what the TLS edge may certify.

A domain (`CustomDomainActor`) is registered `pending`, verified by DNS (a CNAME
to its `verification_target`), routed by the preview router as its resource's own
host, made `active` by its first HTTPS request through the edge, and removed by
DELETE or with its resource. `EdgeHosts` answers the edge's `tls/ask` from memory.
"""

from __future__ import annotations

import trio

from .actor import CustomDomainActor, domain_not_found
from .edge_hosts import EdgeHosts
from .messages import DomainDraft, MarkIssued, Remove, Verify
from .names import FQDN, MAX_LENGTH, normalize_fqdn
from .router_plug import CustomDomainRoutes, plug_custom_domains
from .routing_map import DomainMap, DomainRoute
from .service import (
    domain_public,
    find_domain,
    list_domains,
    register_domain,
    remove_domain,
    remove_domains_of,
    verify_domain,
)
from .services import CustomDomainServices
from .store import CustomDomainRecord
from .targets import (
    COMPUTER,
    DEPLOYMENT,
    DeploymentHosts,
    DomainTarget,
    computer_target,
    deployment_not_found,
    find_computer_target,
    find_deployment_target,
)

ACTORS = (CustomDomainActor,)


async def start(platform: CustomDomainServices, edge_hosts: EdgeHosts, edge_secret: str,
                *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the domains into memory, plug them into the router, and follow the bus for the edge."""
    platform.system.register(*ACTORS)
    await platform.custom_domains.load(platform.db)
    platform.preview_route_plugins.append(plug_custom_domains(platform, edge_secret))
    await edge_hosts.run(task_status=task_status)


__all__ = [
    "ACTORS",
    "COMPUTER",
    "DEPLOYMENT",
    "FQDN",
    "MAX_LENGTH",
    "CustomDomainActor",
    "CustomDomainRecord",
    "CustomDomainRoutes",
    "CustomDomainServices",
    "DeploymentHosts",
    "DomainDraft",
    "DomainMap",
    "DomainRoute",
    "DomainTarget",
    "EdgeHosts",
    "MarkIssued",
    "Remove",
    "Verify",
    "computer_target",
    "deployment_not_found",
    "domain_not_found",
    "domain_public",
    "find_computer_target",
    "find_deployment_target",
    "find_domain",
    "list_domains",
    "normalize_fqdn",
    "plug_custom_domains",
    "register_domain",
    "remove_domain",
    "remove_domains_of",
    "start",
    "verify_domain",
]
