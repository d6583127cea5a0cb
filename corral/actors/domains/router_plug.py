"""Custom domains in the preview router: each verified or active FQDN is an exact host.

Exact hosts are looked up before the router's patterns, so `app.example.com` is
never taken for a computer named `app` under a preview domain `example.com`. A
custom domain is served as the resource's own host, its `verification_target`
(`{slug}.{public domain}`): the request is resolved by the route of that host (the
computer's desktop page now, a deployment's active version once deployments route
their hosts), with the browser's Host header left as it was. When the map drops a
domain (DELETE, its resource deleted) its exact host goes, and the name answers the
router's 404 page again.

The first request that reaches the router through the TLS edge over HTTPS (the
edge's secret header and `X-Forwarded-Proto: https`) marks a verified domain
`active` with `tls_issued_at`: Caddy only forwards a request once it holds the
certificate.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import re
from collections.abc import Callable

from corral.net.preview import Decision, Forward, PreviewRequest, RouteTable, page
from corral.storage import utc_now_iso

from .routing_map import DomainMap, DomainRoute
from .service import mark_issued
from .services import CustomDomainServices

log = logging.getLogger("corral.domains.router")

EDGE_HEADER = "x-corral-edge"


class CustomDomainRoutes:
    def __init__(self, platform: CustomDomainServices, table: RouteTable, edge_secret: str) -> None:
        self.platform = platform
        self.table = table
        self.edge_secret = edge_secret
        self.marked: set[str] = set()
        """Domains already told they are active (their actor may not have answered yet)."""

    @property
    def domains(self) -> DomainMap:
        return self.platform.custom_domains

    def attach(self) -> None:
        self.domains.listen(self._changed)

    def _changed(self, fqdn: str, route: DomainRoute | None) -> None:
        if route is None:
            self.table.remove_exact(fqdn)
        else:
            self.table.add_exact(fqdn, self.resolve)

    def through_edge(self, request: PreviewRequest) -> bool:
        presented = request.header(EDGE_HEADER)
        return (
            bool(self.edge_secret) and presented is not None
            and hmac.compare_digest(presented.encode(), self.edge_secret.encode())
            and (request.header("x-forwarded-proto") or "").lower() == "https"
        )

    async def resolve(self, request: PreviewRequest, match: re.Match[str] | None) -> Decision:
        route = self.domains.routable(request.host)
        if route is None:
            return page(404, "no_domain", "No such site", f"Nothing is served at {request.host}.")
        if route.status == "verified" and route.id not in self.marked and self.through_edge(request):
            self.marked.add(route.id)
            try:
                await mark_issued(self.platform, route.id, utc_now_iso())
            except Exception as exc:  # removed meanwhile, or a full mailbox: the next request tells again
                self.marked.discard(route.id)
                log.warning("could not mark custom domain %s active: %s", route.fqdn, exc)
        found = self.table.match(route.target)
        if found is None or found[0] == self.resolve:
            return page(404, "no_site", "No such site", f"Nothing is served at {request.host} yet.")
        resolver, inner = found
        decision = await resolver(PreviewRequest(request.head, route.target, request.peer, request.cookies), inner)
        if isinstance(decision, Forward):  # the tenant's domain: its app's cookies may name its parents
            return dataclasses.replace(decision, own_domain=True)
        return decision


def plug_custom_domains(platform: CustomDomainServices, edge_secret: str) -> Callable[[RouteTable], None]:
    """A preview-router plug-in (`build_router` calls it with the table)."""

    def plug(table: RouteTable) -> None:
        CustomDomainRoutes(platform, table, edge_secret).attach()

    return plug
