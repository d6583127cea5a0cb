"""The caller's own tenant, and its audit log."""

from __future__ import annotations

from corral.actors import tenancy
from corral.actors.tenancy import audit
from corral.errors import forbidden, not_found

from ..context import RequestContext, require_uuid
from ..params import Id, Integer
from ..replies import Reply, data
from ..routing import Router

router = Router("tenant")


@router.get("/tenant", summary="The caller's tenant, with the caller's role in it", scope="org:read")
async def current_tenant(ctx: RequestContext) -> Reply:
    tenant = await tenancy.get_tenant(ctx.db, ctx.tenant_id)
    assert tenant is not None
    return data({**tenancy.tenant_public(tenant), "role": ctx.principal.tenant_role})


@router.get(
    "/audit-log",
    summary="Audit events of key-authenticated mutations, newest first (tenant owners and admins)",
    scope="audit:read",
    query={
        "api_key_id": Id("api_key_id", description="only this key's actions"),
        "workspace_id": Id("workspace_id", description="only actions in this workspace"),
        "limit": Integer("page size", 100, maximum=1000),
        "cursor": "next_cursor of the previous page",
    },
)
async def audit_log(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    tenant_id = ctx.tenant_id
    if not principal.is_tenant_admin:
        raise forbidden("the audit log is visible to tenant owners and admins")
    api_key_id = ctx.query("api_key_id")
    workspace_id = ctx.query("workspace_id")
    if api_key_id is not None:
        api_key_id = require_uuid(api_key_id, "api_key_id")  # "" is refused here; a value is checked by its declaration
    if workspace_id is not None:
        workspace_id = require_uuid(workspace_id, "workspace_id")
    if principal.workspace_id is not None:  # a key restricted to a workspace sees only that workspace's rows
        if workspace_id not in (None, principal.workspace_id):
            raise not_found("workspace not found")
        workspace_id = principal.workspace_id
    limit = ctx.query_int("limit")
    events = await audit.list_entries(
        ctx.db, tenant_id, api_key_id=api_key_id, workspace_id=workspace_id, before=ctx.query("cursor"), limit=limit + 1
    )
    page = events[:limit]
    next_cursor = page[-1].id if len(events) > limit else None
    return data([audit.audit_public(event) for event in page], next_cursor=next_cursor)
