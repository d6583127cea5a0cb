"""The operator's switch for a white-label tenant: its custom domain (used by invite links)."""

from __future__ import annotations

from corral.actors.tenancy import white_label
from corral.errors import validation_error

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router

router = Router("admin")


@router.put(
    "/admin/tenants/{id}/custom-domain",
    summary="Set or clear (null) a tenant's custom domain; its invite links then use that host",
    auth="admin",
    action="tenants.custom_domain",
    request={
        "type": "object",
        "required": ["custom_domain"],
        "properties": {"custom_domain": {"type": ["string", "null"]}},
    },
)
async def set_custom_domain(ctx: RequestContext, id: str) -> Reply:
    tenant_id = require_uuid(id, "tenant id")
    body = await ctx.json()
    if "custom_domain" not in body:
        raise validation_error({"custom_domain": "is required (null clears it)"})
    value = body["custom_domain"]
    if value is not None and not isinstance(value, str):
        raise validation_error({"custom_domain": "must be a string or null"})
    domain = None if value is None else white_label.normalise_domain(value, ctx.platform.settings.public_domain)
    ctx.audit.update(tenant_id=tenant_id, resource_type="tenant", resource_id=tenant_id)
    row = await white_label.set_custom_domain(ctx.db, tenant_id, domain)
    return data({"id": row["id"], "name": row["name"], "created_at": row["created_at"], "custom_domain": row["custom_domain"]})
