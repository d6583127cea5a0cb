"""White-label preview domains of the tenant, a workspace or a project (docs/api.md "Previews").

Bodies are unwrapped like the specification's PUT (contract §3). Reading and
verifying need `org:read` and sight of the scope; setting and removing need
`org:write` and the admin role (tenant owner/admin for the tenant's, workspace
admin for a workspace's or its projects'). Keys restricted to a workspace cannot
change the tenant's domain.
"""

from __future__ import annotations

from typing import Annotated, Any

from corral.actors import previews, tenancy
from corral.actors.tenancy import workspaces as ws
from corral.errors import ApiError, forbidden, not_found
from corral.models import Rule, anchored, model

from ..context import RequestContext, require_uuid
from ..replies import Reply, raw
from ..routing import Router

router = Router("preview-domains")

@model
class SetPreviewDomain:
    # `Any`: the domain's own checks in `previews.put_domain` word every other problem.
    preview_domain: Annotated[
        Any,
        Rule(
            description="apex domain, e.g. example.com (not a public suffix, nor a subdomain of one's own domain)",
            schema={"type": "string", "pattern": anchored(f"{previews.DOMAIN}\\.?"), "maxLength": previews.MAX_DOMAIN + 1},
        ),
    ]


async def _tenant_scope(ctx: RequestContext, *, write: bool) -> previews.Scope:
    tenant = await tenancy.get_tenant(ctx.db, ctx.tenant_id)
    if tenant is None:
        raise not_found("tenant not found")
    principal = ctx.principal
    if write:
        if principal.workspace_id is not None:
            raise forbidden("this key is restricted to one workspace")
        if not principal.is_tenant_admin:
            raise forbidden("the tenant's preview domain is set by tenant owners and admins")
    return previews.Scope("tenant", tenant.id, tenant.id)


async def _workspace_scope(ctx: RequestContext, id: str, minimum: str) -> previews.Scope:
    principal = ctx.principal
    workspace = await ws.get_workspace(ctx.db, ctx.tenant_id, require_uuid(id, "workspace id"))
    ctx.audit.update(workspace_id=workspace.id, resource_type="workspace", resource_id=workspace.id)
    if principal.workspace_id is not None and principal.workspace_id != workspace.id:
        raise ws.not_found(ws.WORKSPACE_NOT_FOUND)
    await ws.require_role(ctx.db, workspace, principal.user_id, principal.tenant_role, minimum)
    return previews.Scope("workspace", workspace.id, ctx.tenant_id, (("tenant", ctx.tenant_id),))


async def _project_scope(ctx: RequestContext, id: str, minimum: str) -> previews.Scope:
    principal = ctx.principal
    project = await ws.get_project(ctx.db, ctx.tenant_id, require_uuid(id, "project id"))
    ctx.audit.update(workspace_id=project.workspace_id, project_id=project.id, resource_type="project", resource_id=project.id)
    workspace = await ws.get_workspace(ctx.db, ctx.tenant_id, project.workspace_id)
    try:
        if principal.workspace_id is not None and principal.workspace_id != workspace.id:
            raise ws.not_found(ws.WORKSPACE_NOT_FOUND)
        await ws.require_role(ctx.db, workspace, principal.user_id, principal.tenant_role, minimum)
    except ApiError as error:
        if error.status == 404:
            raise ws.not_found(ws.PROJECT_NOT_FOUND) from None
        raise
    return previews.Scope("project", project.id, ctx.tenant_id, (("workspace", workspace.id), ("tenant", ctx.tenant_id)))


async def _show(ctx: RequestContext, scope: previews.Scope) -> Reply:
    record = await previews.get_domain(ctx.db, scope)
    return raw(await previews.domain_public(ctx.db, ctx.platform.settings, scope, record))


async def _put(ctx: RequestContext, scope: previews.Scope) -> Reply:
    body = await ctx.body(SetPreviewDomain)
    record = await previews.put_domain(ctx.platform, scope, body.preview_domain)
    return raw(await previews.domain_public(ctx.db, ctx.platform.settings, scope, record))


async def _verify(ctx: RequestContext, scope: previews.Scope) -> Reply:
    record = await previews.get_domain(ctx.db, scope)
    if record is not None:
        record = await previews.verify(ctx.platform, scope.type, scope.id, record.domain)
    return raw(await previews.domain_public(ctx.db, ctx.platform.settings, scope, record))


async def _delete(ctx: RequestContext, scope: previews.Scope) -> Reply:
    await previews.delete_domain(ctx.platform, scope)
    return raw({"preview_domain": None, "status": "removed"})


# -- tenant ------------------------------------------------------------------------------


@router.get("/tenant/preview-domain", summary="The tenant's preview domain", scope="org:read")
async def get_tenant_domain(ctx: RequestContext) -> Reply:
    return await _show(ctx, await _tenant_scope(ctx, write=False))


@router.put(
    "/tenant/preview-domain",
    summary="Set the tenant's preview domain (apex); status pending_dns until its CNAMEs resolve",
    scope="org:write",
    action="preview_domains.set",
    request=SetPreviewDomain,
)
async def put_tenant_domain(ctx: RequestContext) -> Reply:
    return await _put(ctx, await _tenant_scope(ctx, write=True))


@router.post("/tenant/preview-domain/verify", summary="Check the tenant's preview domain's DNS now", scope="org:read", action="preview_domains.verify")
async def verify_tenant_domain(ctx: RequestContext) -> Reply:
    return await _verify(ctx, await _tenant_scope(ctx, write=False))


@router.get("/tenant/preview-domain/verify", summary="Check the tenant's preview domain's DNS now", scope="org:read")
async def verify_tenant_domain_get(ctx: RequestContext) -> Reply:
    return await _verify(ctx, await _tenant_scope(ctx, write=False))


@router.delete("/tenant/preview-domain", summary="Remove the tenant's preview domain", scope="org:write", action="preview_domains.delete")
async def delete_tenant_domain(ctx: RequestContext) -> Reply:
    return await _delete(ctx, await _tenant_scope(ctx, write=True))


# -- workspaces and projects -------------------------------------------------------------


@router.get("/workspaces/{id}/preview-domain", summary="A workspace's preview domain", scope="org:read")
async def get_workspace_domain(ctx: RequestContext, id: str) -> Reply:
    return await _show(ctx, await _workspace_scope(ctx, id, "viewer"))


@router.put("/workspaces/{id}/preview-domain", summary="Set a workspace's preview domain (workspace admin)", scope="org:write",
            action="preview_domains.set", request=SetPreviewDomain)
async def put_workspace_domain(ctx: RequestContext, id: str) -> Reply:
    return await _put(ctx, await _workspace_scope(ctx, id, "admin"))


@router.delete("/workspaces/{id}/preview-domain", summary="Remove a workspace's preview domain (workspace admin)", scope="org:write",
               action="preview_domains.delete")
async def delete_workspace_domain(ctx: RequestContext, id: str) -> Reply:
    return await _delete(ctx, await _workspace_scope(ctx, id, "admin"))


@router.get("/workspaces/{id}/preview-domain/verify", summary="Check a workspace's preview domain's DNS now", scope="org:read")
async def verify_workspace_domain(ctx: RequestContext, id: str) -> Reply:
    return await _verify(ctx, await _workspace_scope(ctx, id, "viewer"))


@router.post("/workspaces/{id}/preview-domain/verify", summary="Check a workspace's preview domain's DNS now", scope="org:read",
             action="preview_domains.verify")
async def verify_workspace_domain_post(ctx: RequestContext, id: str) -> Reply:
    return await _verify(ctx, await _workspace_scope(ctx, id, "viewer"))


@router.get("/projects/{id}/preview-domain", summary="A project's preview domain", scope="org:read")
async def get_project_domain(ctx: RequestContext, id: str) -> Reply:
    return await _show(ctx, await _project_scope(ctx, id, "viewer"))


@router.put("/projects/{id}/preview-domain", summary="Set a project's preview domain (admin of its workspace)", scope="org:write",
            action="preview_domains.set", request=SetPreviewDomain)
async def put_project_domain(ctx: RequestContext, id: str) -> Reply:
    return await _put(ctx, await _project_scope(ctx, id, "admin"))


@router.delete("/projects/{id}/preview-domain", summary="Remove a project's preview domain (admin of its workspace)", scope="org:write",
               action="preview_domains.delete")
async def delete_project_domain(ctx: RequestContext, id: str) -> Reply:
    return await _delete(ctx, await _project_scope(ctx, id, "admin"))


@router.get("/projects/{id}/preview-domain/verify", summary="Check a project's preview domain's DNS now", scope="org:read")
async def verify_project_domain(ctx: RequestContext, id: str) -> Reply:
    return await _verify(ctx, await _project_scope(ctx, id, "viewer"))


@router.post("/projects/{id}/preview-domain/verify", summary="Check a project's preview domain's DNS now", scope="org:read",
             action="preview_domains.verify")
async def verify_project_domain_post(ctx: RequestContext, id: str) -> Reply:
    return await _verify(ctx, await _project_scope(ctx, id, "viewer"))
