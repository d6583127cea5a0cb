"""Workspaces and projects (the specification leaves their routes to us; docs/api.md)."""

from __future__ import annotations

from typing import Annotated

from corral.actors import tenancy
from corral.actors.tenancy import ProjectRecord, WorkspaceRecord, store
from corral.actors.tenancy import workspaces as ws
from corral.actors.tenancy.slugs import SLUG
from corral.models import Rule, model

from ..context import RequestContext, require_uuid
from ..params import Id
from ..replies import Reply, data
from ..routing import Router

router = Router("workspaces")

Name = Annotated[str, Rule(max_length=100)]
Slug = Annotated[str | None, Rule(pattern=SLUG, message="must be a DNS label (lowercase letters, digits, hyphens)")]


@model(missing="details")
class Rename:
    """Either or both; a field left out stays as it is."""

    name: Name | None = None
    slug: Slug = None


@model(missing="details")
class NewWorkspace:
    """The slug defaults to one made from the name."""

    name: Name
    slug: Slug = None


@model(missing="details")
class NewProject(NewWorkspace):
    workspace_id: Annotated[str | None, Rule(format="uuid", description="default: the key's workspace, else the tenant's default")] = None


async def _workspace(ctx: RequestContext, workspace_id: str, minimum: str) -> tuple[WorkspaceRecord, str]:
    principal = ctx.principal
    workspace = await ws.get_workspace(ctx.db, ctx.tenant_id, require_uuid(workspace_id, "workspace id"))
    ctx.audit.update(workspace_id=workspace.id)  # refused attempts are audited against it too
    if principal.workspace_id is not None and principal.workspace_id != workspace.id:
        raise ws.not_found(ws.WORKSPACE_NOT_FOUND)
    role = await ws.require_role(ctx.db, workspace, principal.user_id, principal.tenant_role, minimum)
    return workspace, role


@router.get("/workspaces", summary="Workspaces the caller can see, with the caller's role", scope="org:read")
async def list_workspaces(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    pairs = await ws.list_workspaces(ctx.db, ctx.tenant_id, principal.user_id, principal.tenant_role)
    if principal.workspace_id is not None:
        pairs = [(workspace, role) for workspace, role in pairs if workspace.id == principal.workspace_id]
    return data([tenancy.workspace_public(workspace, role) for workspace, role in pairs])


@router.post(
    "/workspaces",
    summary="Create a workspace (with a default project); the creator becomes its owner",
    scope="org:write",
    action="workspaces.create",
    status=201,
    request=NewWorkspace,
)
async def create_workspace(ctx: RequestContext) -> Reply:
    body = await ctx.body(NewWorkspace)
    name, slug = body.name, body.slug
    principal = ctx.principal
    if principal.workspace_id is not None:
        raise ws.forbidden("this key is restricted to one workspace")
    workspace = await ws.create_workspace(ctx.db, ctx.tenant_id, name, slug, principal.user_id)
    ctx.audit.update(workspace_id=workspace.id, resource_type="workspace", resource_id=workspace.id)
    return data(tenancy.workspace_public(workspace, "owner" if principal.user_id else principal.tenant_role), 201)


@router.get("/workspaces/{id}", summary="One workspace", scope="org:read")
async def get_workspace(ctx: RequestContext, id: str) -> Reply:
    workspace, role = await _workspace(ctx, id, "viewer")
    return data(tenancy.workspace_public(workspace, role))


@router.patch(
    "/workspaces/{id}",
    summary="Rename a workspace or change its slug (admin or owner)",
    scope="org:write",
    action="workspaces.update",
    request=Rename,
)
async def update_workspace(ctx: RequestContext, id: str) -> Reply:
    workspace, role = await _workspace(ctx, id, "admin")
    body = await ctx.body(Rename)
    name, slug = body.name, body.slug
    ctx.audit.update(resource_type="workspace", resource_id=workspace.id)
    return data(tenancy.workspace_public(await ws.update_workspace(ctx.db, workspace, name, slug), role))


@router.delete(
    "/workspaces/{id}",
    summary="Delete a workspace and its projects (owner); the default workspace stays",
    scope="org:write",
    action="workspaces.delete",
)
async def delete_workspace(ctx: RequestContext, id: str) -> Reply:
    workspace, _ = await _workspace(ctx, id, "owner")
    ctx.audit.update(resource_type="workspace", resource_id=workspace.id)
    await ws.delete_workspace(ctx.db, workspace)
    return data({"id": workspace.id, "deleted": True})


@router.get("/workspaces/{id}/projects", summary="Projects of a workspace", scope="org:read")
async def list_workspace_projects(ctx: RequestContext, id: str) -> Reply:
    workspace, _ = await _workspace(ctx, id, "viewer")
    return data([tenancy.project_public(project) for project in await ws.list_projects(ctx.db, ctx.tenant_id, [workspace.id])])


@router.get(
    "/projects",
    summary="Projects in every workspace the caller can see",
    scope="org:read",
    query={"workspace_id": Id("workspace id", description="only this workspace's projects")},
)
async def list_projects(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    wanted = ctx.query("workspace_id")
    if wanted is not None:
        workspace, _ = await _workspace(ctx, wanted, "viewer")
        ids = [workspace.id]
    else:
        pairs = await ws.list_workspaces(ctx.db, ctx.tenant_id, principal.user_id, principal.tenant_role)
        ids = [seen.id for seen, _ in pairs if principal.workspace_id in (None, seen.id)]
    return data([tenancy.project_public(project) for project in await ws.list_projects(ctx.db, ctx.tenant_id, ids)])


@router.post(
    "/projects",
    summary="Create a project in a workspace (member or above); default: the tenant's default workspace",
    scope="org:write",
    action="projects.create",
    status=201,
    request=NewProject,
)
async def create_project(ctx: RequestContext) -> Reply:
    body = await ctx.body(NewProject)
    name, slug = body.name, body.slug
    workspace_id = body.workspace_id or ctx.principal.workspace_id  # a restricted key's own workspace
    if workspace_id is None:
        workspace_id = await store.workspaces.default_id(ctx.db, ctx.tenant_id)
    workspace, _ = await _workspace(ctx, str(workspace_id), "member")
    project = await ws.create_project(ctx.db, workspace, name, slug)
    ctx.audit.update(project_id=project.id, resource_type="project", resource_id=project.id)
    return data(tenancy.project_public(project), 201)


async def _project(ctx: RequestContext, project_id: str, minimum: str) -> ProjectRecord:
    project = await ws.get_project(ctx.db, ctx.tenant_id, require_uuid(project_id, "project id"))
    ctx.audit.update(project_id=project.id)
    try:
        await _workspace(ctx, project.workspace_id, minimum)
    except ws.ApiError as error:
        if error.status == 404:
            raise ws.not_found(ws.PROJECT_NOT_FOUND) from None
        raise
    return project


@router.get("/projects/{id}", summary="One project", scope="org:read")
async def get_project(ctx: RequestContext, id: str) -> Reply:
    return data(tenancy.project_public(await _project(ctx, id, "viewer")))


@router.patch(
    "/projects/{id}",
    summary="Rename a project or change its slug (member or above)",
    scope="org:write",
    action="projects.update",
    request=Rename,
)
async def update_project(ctx: RequestContext, id: str) -> Reply:
    project = await _project(ctx, id, "member")
    body = await ctx.body(Rename)
    name, slug = body.name, body.slug
    ctx.audit.update(resource_type="project", resource_id=project.id)
    return data(tenancy.project_public(await ws.update_project(ctx.db, project, name, slug)))


@router.delete(
    "/projects/{id}",
    summary="Delete a project (admin or owner of its workspace); the default project stays",
    scope="org:write",
    action="projects.delete",
)
async def delete_project(ctx: RequestContext, id: str) -> Reply:
    project = await _project(ctx, id, "admin")
    ctx.audit.update(resource_type="project", resource_id=project.id)
    await ws.delete_project(ctx.db, project)
    return data({"id": project.id, "deleted": True})
