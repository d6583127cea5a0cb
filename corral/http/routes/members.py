"""Workspace members (specification: "Workspace members and invites").

The role rules live in `corral.actors.tenancy.members`; these routes read and check
the body, resolve the workspace with the caller's role, and shape the responses.
"""

from __future__ import annotations

from typing import Annotated, Literal

from corral.actors.tenancy import TENANT_ROLES, WORKSPACE_ROLES, WorkspaceRecord
from corral.actors.tenancy import members as ms
from corral.actors.tenancy import workspaces as ws
from corral.models import Rule, model

from ..context import RequestContext, require_uuid
from ..replies import Reply, data, raw
from ..routing import Router

router = Router("members")

MAX_EMAIL_LENGTH = 254


async def workspace_for(ctx: RequestContext, workspace_id: str, minimum: str) -> tuple[WorkspaceRecord, str]:
    """The workspace and the caller's role in it: 404 when they cannot see it (or their key
    is restricted to another workspace), 403 when their role is below `minimum`."""
    principal = ctx.principal
    workspace = await ws.get_workspace(ctx.db, ctx.tenant_id, require_uuid(workspace_id, "workspace id"))
    ctx.audit.update(workspace_id=workspace.id)
    if principal.workspace_id is not None and principal.workspace_id != workspace.id:
        raise ws.not_found(ws.WORKSPACE_NOT_FOUND)
    role = await ws.require_role(ctx.db, workspace, principal.user_id, principal.tenant_role, minimum)
    return workspace, role


def _email_problem(value: str) -> str | None:
    local, at, domain = value.rpartition("@")
    if not at or not local or "." not in domain.strip(".") or any(c.isspace() for c in value) or len(value) > MAX_EMAIL_LENGTH:
        return "must be an e-mail address"
    return None


Email = Annotated[str, Rule(check=_email_problem, format="email")]
WorkspaceRole = Literal[WORKSPACE_ROLES]  # type: ignore[valid-type]
TenantRole = Literal[TENANT_ROLES]  # type: ignore[valid-type]


@model(missing=lambda names: ms.missing_field(names[0]))
class AddMember:
    user_id: Annotated[str, Rule(format="uuid")]
    role: WorkspaceRole


@model(missing=lambda names: ms.missing_field(names[0]))
class ChangeRole:
    role: WorkspaceRole


@model(missing=lambda names: ms.missing_field(names[0]))
class InviteToWorkspace:
    email: Email
    role: WorkspaceRole


@model(missing=lambda names: ms.missing_field(names[0]))
class InviteToTenant:
    email: Email
    role: TenantRole


@router.get("/workspaces/{id}/members", summary="Members of a workspace (viewer or above)", scope="org:read")
async def list_members(ctx: RequestContext, id: str) -> Reply:
    workspace, _ = await workspace_for(ctx, id, "viewer")
    return data([ms.member_public(member) for member in await ms.list_members(ctx.db, workspace.id)])


@router.post(
    "/workspaces/{id}/members",
    summary="Add a member of the organization to a workspace (admin; owner to grant owner)",
    scope="org:write",
    action="workspace_members.add",
    status=201,
    request=AddMember,
)
async def add_member(ctx: RequestContext, id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    body = await ctx.body(AddMember)
    user_id, new_role = body.user_id, body.role
    ctx.audit.update(resource_type="workspace_member", resource_id=user_id)
    member = await ms.add_member(ctx.db, workspace, user_id.lower(), new_role, actor_role=role, actor_id=ctx.principal.user_id)
    return data(ms.membership_public(member), 201)


@router.patch(
    "/workspaces/{id}/members/{user_id}",
    summary="Change a member's role (admin; owner when the owner role is involved); 409 LAST_OWNER",
    scope="org:write",
    action="workspace_members.update",
    request=ChangeRole,
)
async def change_role(ctx: RequestContext, id: str, user_id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    member_id = require_uuid(user_id, "user id")
    new_role = (await ctx.body(ChangeRole)).role
    ctx.audit.update(resource_type="workspace_member", resource_id=member_id)
    member = await ms.change_role(ctx.db, workspace, member_id, new_role, actor_role=role)
    return data(ms.membership_public(member))


@router.delete(
    "/workspaces/{id}/members/{user_id}",
    summary="Remove a member from the workspace only (admin, or the member themselves); 409 LAST_OWNER",
    scope="org:write",
    action="workspace_members.remove",
)
async def remove_member(ctx: RequestContext, id: str, user_id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "viewer")
    member_id = require_uuid(user_id, "user id")
    ctx.audit.update(resource_type="workspace_member", resource_id=member_id)
    await ms.remove_member(ctx.db, workspace, member_id, actor_role=role, actor_id=ctx.principal.user_id)
    return raw({"deleted": True})
