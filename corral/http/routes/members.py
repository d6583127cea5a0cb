"""Workspace members (specification: "Workspace members and invites").

The role rules live in `corral.actors.tenancy.members`; these routes read and check
the body, resolve the workspace with the caller's role, and shape the responses.
"""

from __future__ import annotations

from typing import Any

from corral.actors.tenancy import WORKSPACE_ROLES
from corral.actors.tenancy import members as ms
from corral.actors.tenancy import workspaces as ws
from corral.errors import validation_error
from corral.ids import is_uuid
from corral.storage import Row

from ..context import RequestContext, require_uuid
from ..replies import Reply, data, raw
from ..routing import Router

router = Router("members")

ROLE_SCHEMA: dict[str, Any] = {"enum": list(WORKSPACE_ROLES)}
MAX_EMAIL_LENGTH = 254


async def workspace_for(ctx: RequestContext, workspace_id: str, minimum: str) -> tuple[Row, str]:
    """The workspace and the caller's role in it: 404 when they cannot see it (or their key
    is restricted to another workspace), 403 when their role is below `minimum`."""
    principal = ctx.principal
    workspace = await ws.get_workspace(ctx.db, ctx.tenant_id, require_uuid(workspace_id, "workspace id"))
    ctx.audit.update(workspace_id=workspace["id"])
    if principal.workspace_id is not None and principal.workspace_id != workspace["id"]:
        raise ws.not_found(ws.WORKSPACE_NOT_FOUND)
    role = await ws.require_role(ctx.db, workspace, principal.user_id, principal.tenant_role, minimum)
    return workspace, role


def required(body: dict[str, Any], name: str) -> Any:
    """The field, or 422 with its own code (`MISSING_USER_ID`, `MISSING_ROLE`, `MISSING_EMAIL`)."""
    value = body.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ms.missing_field(name)
    return value


def role_field(body: dict[str, Any], choices: tuple[str, ...]) -> str:
    value = required(body, "role")
    if value not in choices:
        raise validation_error({"role": f"must be one of {', '.join(choices)}"})
    return str(value)


def email_field(body: dict[str, Any]) -> str:
    value = required(body, "email")
    if not isinstance(value, str):
        raise validation_error({"email": "must be a string"})
    email = value.strip()
    local, at, domain = email.rpartition("@")
    if not at or not local or "." not in domain.strip(".") or any(c.isspace() for c in email) or len(email) > MAX_EMAIL_LENGTH:
        raise validation_error({"email": "must be an e-mail address"})
    return email


@router.get("/workspaces/{id}/members", summary="Members of a workspace (viewer or above)", scope="org:read")
async def list_members(ctx: RequestContext, id: str) -> Reply:
    workspace, _ = await workspace_for(ctx, id, "viewer")
    return data([ms.member_public(row) for row in await ms.list_members(ctx.db, workspace["id"])])


@router.post(
    "/workspaces/{id}/members",
    summary="Add a member of the organization to a workspace (admin; owner to grant owner)",
    scope="org:write",
    action="workspace_members.add",
    status=201,
    request={
        "type": "object",
        "required": ["user_id", "role"],
        "properties": {"user_id": {"type": "string", "format": "uuid"}, "role": ROLE_SCHEMA},
    },
)
async def add_member(ctx: RequestContext, id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    body = await ctx.json()
    user_id = required(body, "user_id")
    required(body, "role")  # presence of both first, then formats
    new_role = role_field(body, WORKSPACE_ROLES)
    if not isinstance(user_id, str) or not is_uuid(user_id):
        raise validation_error({"user_id": "must be a UUID"})
    ctx.audit.update(resource_type="workspace_member", resource_id=user_id)
    row = await ms.add_member(ctx.db, workspace, user_id.lower(), new_role, actor_role=role, actor_id=ctx.principal.user_id)
    return data(ms.membership_public(row), 201)


@router.patch(
    "/workspaces/{id}/members/{user_id}",
    summary="Change a member's role (admin; owner when the owner role is involved); 409 LAST_OWNER",
    scope="org:write",
    action="workspace_members.update",
    request={"type": "object", "required": ["role"], "properties": {"role": ROLE_SCHEMA}},
)
async def change_role(ctx: RequestContext, id: str, user_id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    member_id = require_uuid(user_id, "user id")
    new_role = role_field(await ctx.json(), WORKSPACE_ROLES)
    ctx.audit.update(resource_type="workspace_member", resource_id=member_id)
    row = await ms.change_role(ctx.db, workspace, member_id, new_role, actor_role=role)
    return data(ms.membership_public(row))


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
