"""The preview router's composition: the net layer's router, this layer's resolver.

`corral/net` must not import `corral/actors`, so the router is handed its policy
here: a routing table whose sandbox pattern resolves through `PreviewAccess`
(tokens, sandbox addresses, activity) and whose computer pattern (`{slug}.{domain}`,
a computer's desktop page and streams) through `DesktopAccess`. The router listens on `--preview-port`
beside the API (`corral.http.run_api` starts both); this task also runs the access
cache's event listener and the background re-check of preview domains, and stops
them all when `stop` is set. Deployments and custom domains will add their routes
to the same table here.
"""

from __future__ import annotations

import trio

from corral.net.preview import PreviewRouter, RouteTable

from .access import access_for
from .desktops import COMPUTER_HOST_PATTERN, DesktopAccess
from .domains import recheck_forever
from .services import PreviewServices
from .urls import SANDBOX_HOST_PATTERN


def build_router(platform: PreviewServices) -> PreviewRouter:
    access = access_for(platform)
    table = RouteTable()
    table.add_pattern("sandbox-port", SANDBOX_HOST_PATTERN, access.resolve_sandbox)
    table.add_pattern("computer", COMPUTER_HOST_PATTERN, DesktopAccess(platform).resolve_computer)
    for plug in platform.preview_route_plugins:
        plug(table)
    return PreviewRouter(table, scheme=platform.settings.preview_url_scheme)


async def run_preview(platform: PreviewServices, stop: trio.Event, *, task_status: trio.TaskStatus[PreviewRouter] = trio.TASK_STATUS_IGNORED) -> None:
    settings = platform.settings
    router = build_router(platform)
    async with trio.open_nursery() as nursery:
        await nursery.start(access_for(platform).run)
        await nursery.start(router.serve, settings.host, settings.preview_port)
        await nursery.start(recheck_forever, platform)
        platform.preview_router = router
        task_status.started(router)
        await stop.wait()
        nursery.cancel_scope.cancel()
