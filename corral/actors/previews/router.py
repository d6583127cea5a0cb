"""The preview router's composition: the net layer's router, this layer's resolver.

`corral/net` must not import `corral/actors`, so the router is handed its policy
here: a routing table whose sandbox pattern resolves through `PreviewAccess`
(tokens, sandbox addresses, activity) and whose computer pattern (`{slug}.{domain}`,
a computer's desktop page and streams) through `DesktopAccess`. The router listens on `--preview-port`
beside the API (`corral.http.run_api` starts both); this task also runs the access
cache's and the desktops' event listeners and the background re-check of preview domains, and stops
them all when `stop` is set. Deployments share the `{slug}.{domain}` pattern with
computers through `ResourceHosts`.
"""

from __future__ import annotations

import re

import trio

from corral.net.preview import Decision, PreviewRequest, PreviewRouter, Resolver, RouteTable

from .access import access_for
from .desktops import COMPUTER_HOST_PATTERN, DesktopAccess
from .domains import recheck_forever
from .remote import signer_for
from .services import PreviewServices
from .urls import SANDBOX_HOST_PATTERN


class ResourceHosts:
    """The one resolver of `{slug}.{domain}` hosts: a deployment's (its production or
    `v{n}-` version URL) when the deployments' table knows the slug, else a computer's
    desktop (slugs are unique across both)."""

    def __init__(self, platform: PreviewServices, computers: Resolver) -> None:
        self.platform = platform
        self.computers = computers

    async def resolve(self, request: PreviewRequest, match: re.Match[str] | None) -> Decision:
        sites = self.platform.deployment_sites
        if sites is not None:
            decision = await sites.resolve(request, match)
            if decision is not None:
                return decision
        return await self.computers(request, match)


def build_router(platform: PreviewServices, desktops: DesktopAccess | None = None) -> PreviewRouter:
    access = access_for(platform)
    table = RouteTable()
    table.add_pattern("sandbox-port", SANDBOX_HOST_PATTERN, access.resolve_sandbox)
    hosts = ResourceHosts(platform, (desktops or DesktopAccess(platform)).resolve_computer)
    table.add_pattern("computer", COMPUTER_HOST_PATTERN, hosts.resolve)
    for plug in platform.preview_route_plugins:
        plug(table)
    return PreviewRouter(table, scheme=platform.settings.preview_url_scheme, relay_check=signer_for(platform).check)


async def run_preview(platform: PreviewServices, stop: trio.Event, *, task_status: trio.TaskStatus[PreviewRouter] = trio.TASK_STATUS_IGNORED) -> None:
    settings = platform.settings
    desktops = DesktopAccess(platform)
    router = build_router(platform, desktops)
    async with trio.open_nursery() as nursery:
        await nursery.start(access_for(platform).run)
        await nursery.start(desktops.run)
        await nursery.start(router.serve, settings.host, settings.preview_port)
        await nursery.start(recheck_forever, platform)
        platform.preview_router = router
        task_status.started(router)
        await stop.wait()
        nursery.cancel_scope.cancel()
