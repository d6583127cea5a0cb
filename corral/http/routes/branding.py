"""Tenant branding (contract §16): read by any member, changed by owners and admins.

Like the preview-domain endpoints, these accept API keys as well as sessions (spec,
authentication rule 6).
"""

from __future__ import annotations

from corral.actors.tenancy import branding
from corral.errors import forbidden

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router

router = Router("tenant")


@router.get("/tenant/branding", summary="The tenant's branding (invite pages, e-mails, invite URLs)", scope="org:read")
async def get_branding(ctx: RequestContext) -> Reply:
    return data((await branding.get_branding(ctx.db, ctx.tenant_id)).public())


@router.put(
    "/tenant/branding",
    summary="Change the tenant's branding (owner or admin); absent fields stay, null clears",
    scope="org:write",
    action="tenant.branding.update",
    request=branding.BrandingChange,
)
async def put_branding(ctx: RequestContext) -> Reply:
    tenant_id = ctx.tenant_id
    if not ctx.principal.is_tenant_admin:
        raise forbidden("branding can be changed by the tenant's owners and admins")
    change = await ctx.body(branding.BrandingChange)
    ctx.audit.update(resource_type="tenant", resource_id=tenant_id)
    updated = await branding.update_branding(ctx.db, tenant_id, change, ctx.platform.settings.public_domain)
    return data(updated.public())
