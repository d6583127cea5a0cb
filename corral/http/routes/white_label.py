"""The operator's switch for a white-label tenant: its custom domain (used by invite links)."""

from __future__ import annotations

from typing import Annotated

from corral.actors.tenancy import white_label
from corral.errors import validation_error
from corral.models import Rule, anchored, model

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router

router = Router("admin")


@model(missing=lambda names: validation_error({"custom_domain": "is required (null clears it)"}))
class CustomDomain:
    custom_domain: Annotated[
        str | None,
        Rule(
            message="must be a string or null",
            description="a host name; null clears it",
            schema={"pattern": anchored(f"{white_label.HOST}\\.?"), "maxLength": white_label.MAX_DOMAIN_LENGTH + 1},
        ),
    ]


@router.put(
    "/admin/tenants/{id}/custom-domain",
    summary="Set or clear (null) a tenant's custom domain; its invite links then use that host",
    auth="admin",
    action="tenants.custom_domain",
    request=CustomDomain,
)
async def set_custom_domain(ctx: RequestContext, id: str) -> Reply:
    tenant_id = require_uuid(id, "tenant id")
    value = (await ctx.body(CustomDomain)).custom_domain
    domain = None if value is None else white_label.normalise_domain(value, ctx.platform.settings.public_domain)
    ctx.audit.update(tenant_id=tenant_id, resource_type="tenant", resource_id=tenant_id)
    tenant = await white_label.set_custom_domain(ctx.db, tenant_id, domain)
    return data({"id": tenant.id, "name": tenant.name, "created_at": tenant.created_at, "custom_domain": tenant.custom_domain})
