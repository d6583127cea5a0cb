"""`GET /api/v1/tls/ask?domain=`: may the TLS edge hold a certificate for this name? (contract §12)

Caddy's on-demand TLS asks before every certificate, also before loading one from
its storage. No auth; the answer comes from memory (`corral.actors.domains.EdgeHosts`;
a sandbox or computer host memory has not heard of yet is looked up in the store):
200 for a verified or active custom domain and for a host of a live resource under
the service's or a configured preview domain, else 404 (also for a missing or bad
name, and while the node is still loading: it fails closed).
"""

from __future__ import annotations

from corral.errors import not_found

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router

router = Router("tls")


ASK_RPM = 30_000
"""Per client address: Caddy asks from one address, before every certificate it needs."""


@router.get("/tls/ask", summary="200 if the edge may get a certificate for ?domain=, else 404", auth="public",
            query={"domain": "the host name Caddy asks about"}, public_rpm=ASK_RPM)
async def ask(ctx: RequestContext) -> Reply:
    name = (ctx.query("domain") or "").strip().lower().rstrip(".")
    hosts = ctx.platform.edge_hosts
    if not name or hosts is None or not await hosts.allows_now(name):
        raise not_found("the edge may not hold a certificate for this name")
    return data({"domain": name, "allowed": True})
