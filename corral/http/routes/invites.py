"""Workspace and org invites (specification: "Workspace members and invites", contract §7).

Workspace invites are managed by workspace admins with any credential; org invites
(`/tenants/{id}/invites`) are tenant administration, which the specification's
Authentication rule 6 reserves for a JWT session of a tenant admin or owner. The
token lookups are public; accepting needs the invited user's own credential.
"""

from __future__ import annotations

from corral.actors.tenancy import TenantRecord, store
from corral.actors.tenancy import invites as inv
from corral.actors.tenancy.members import membership_public
from corral.errors import forbidden, invalid_id, not_found

from ..context import RequestContext, require_uuid
from ..replies import Reply, data, raw
from ..routing import Router
from .members import InviteToTenant, InviteToWorkspace, workspace_for

router = Router("invites")



def _invite_id(value: str) -> str:
    if not inv.INVITE_ID.match(value):
        raise invalid_id("invite id")
    return value


def _caller_user(ctx: RequestContext) -> tuple[str, str | None]:
    principal = ctx.principal
    if principal.user_id is None:
        raise forbidden("accepting an invite needs the invited user's own credential (a JWT or a user key)")
    return principal.user_id, principal.email


# --- workspace invites -----------------------------------------------------------------


@router.post(
    "/workspaces/{id}/invites",
    summary="Invite an e-mail address to a workspace (admin); a tenant member's address is added at once",
    scope="org:write",
    action="workspace_invites.create",
    status=201,
    request=InviteToWorkspace,
)
async def create_workspace_invite(ctx: RequestContext, id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    body = await ctx.body(InviteToWorkspace)
    email, new_role = body.email, body.role
    outcome = await inv.invite_to_workspace(ctx.platform, workspace, email, new_role, actor_role=role, actor_id=ctx.principal.user_id)
    if outcome.member is not None:
        ctx.audit.update(resource_type="workspace_member", resource_id=outcome.member.user_id)
        return raw({"type": "added", "data": membership_public(outcome.member)}, 200)
    assert outcome.invite is not None
    ctx.audit.update(resource_type="invite", resource_id=outcome.invite.invite.id)
    record = {**inv.workspace_invite_public(outcome.invite.invite), "invite_url": outcome.invite.url}
    return raw({"type": "invited", "data": record}, 201)


@router.get("/workspaces/{id}/invites", summary="Pending invites of a workspace (admin)", scope="org:read")
async def list_workspace_invites(ctx: RequestContext, id: str) -> Reply:
    workspace, _ = await workspace_for(ctx, id, "admin")
    invites = await inv.list_pending(ctx.db, kind=inv.WORKSPACE, tenant_id=workspace.tenant_id, workspace_id=workspace.id)
    return data([inv.workspace_invite_public(invite) for invite in invites])


@router.delete(
    "/workspaces/{id}/invites/{invite_id}",
    summary="Revoke a workspace invite (admin); 409 ALREADY_ACCEPTED once accepted",
    scope="org:write",
    action="workspace_invites.revoke",
)
async def revoke_workspace_invite(ctx: RequestContext, id: str, invite_id: str) -> Reply:
    workspace, role = await workspace_for(ctx, id, "admin")
    ctx.audit.update(resource_type="invite", resource_id=_invite_id(invite_id))
    invite = await inv.revoke(
        ctx.db, kind=inv.WORKSPACE, tenant_id=workspace.tenant_id, workspace_id=workspace.id, invite_id=invite_id, actor_role=role
    )
    return raw({"invite_id": invite.id, "revoked": True})


@router.get("/workspace-invites/{token}", summary="A workspace invite by its token", auth="public")
async def lookup_workspace_invite(ctx: RequestContext, token: str) -> Reply:
    invite = await inv.lookup(ctx.db, inv.WORKSPACE, token)
    return data(
        {
            "workspace_name": invite.workspace_name,
            "role": invite.role,
            "expires_at": invite.expires_at,
            "expired": inv.is_expired(invite),
            "accepted": invite.accepted_at is not None,
        }
    )


@router.post(
    "/workspace-invites/{token}/accept",
    summary="Accept a workspace invite as the invited user; joins the organization too when needed",
    scope="org:write",
    action="workspace_invites.accept",
)
async def accept_workspace_invite(ctx: RequestContext, token: str) -> Reply:
    user_id, email = _caller_user(ctx)
    await _audit_invite(ctx, inv.WORKSPACE, token)
    return raw(await inv.accept_workspace_invite(ctx.db, token, user_id=user_id, email=email))


async def _audit_invite(ctx: RequestContext, kind: str, token: str) -> None:
    """Record the attempt in the inviting tenant's audit log."""
    found = await inv.find_by_token(ctx.db, kind, token)
    if found is not None:
        ctx.audit.update(tenant_id=found.tenant_id, workspace_id=found.workspace_id, resource_type="invite", resource_id=found.id)


# --- org invites -----------------------------------------------------------------------


async def _tenant_for_admin(ctx: RequestContext, tenant_id: str) -> tuple[TenantRecord, str]:
    """The caller's own tenant (another id is 404), for a JWT session of an admin or owner."""
    wanted = require_uuid(tenant_id, "tenant id")
    principal = ctx.principal
    if wanted != ctx.tenant_id:
        raise not_found("tenant not found")
    if principal.kind != "session":
        raise forbidden("tenant administration needs a JWT session from POST /auth/login; API keys are not accepted here")
    if not principal.is_tenant_admin or principal.tenant_role is None:
        raise forbidden("requires the admin or owner role in this organization")
    tenant = await store.tenants.load(ctx.db, wanted)
    if tenant is None:
        raise not_found("tenant not found")
    return tenant, principal.tenant_role


@router.post(
    "/tenants/{id}/invites",
    summary="Invite an e-mail address to the organization (JWT session of an admin or owner)",
    scope="org:write",
    action="tenant_invites.create",
    status=201,
    request=InviteToTenant,
)
async def create_tenant_invite(ctx: RequestContext, id: str) -> Reply:
    tenant, role = await _tenant_for_admin(ctx, id)
    body = await ctx.body(InviteToTenant)
    email, new_role = body.email, body.role
    issued = await inv.invite_to_tenant(ctx.platform, tenant, email, new_role, actor_role=role, actor_id=ctx.principal.user_id)
    invite = issued.invite
    ctx.audit.update(resource_type="invite", resource_id=invite.id)
    return data(
        {"invite_id": invite.id, "email": invite.email, "role": invite.role, "expires_at": invite.expires_at, "invite_url": issued.url},
        201,
    )


@router.get("/tenants/{id}/invites", summary="Pending org invites (JWT session of an admin or owner)", scope="org:read")
async def list_tenant_invites(ctx: RequestContext, id: str) -> Reply:
    tenant, _ = await _tenant_for_admin(ctx, id)
    invites = await inv.list_pending(ctx.db, kind=inv.TENANT, tenant_id=tenant.id)
    return data([inv.tenant_invite_public(invite) for invite in invites])


@router.delete(
    "/tenants/{id}/invites/{invite_id}",
    summary="Revoke an org invite (JWT session of an admin or owner); 409 ALREADY_ACCEPTED once accepted",
    scope="org:write",
    action="tenant_invites.revoke",
)
async def revoke_tenant_invite(ctx: RequestContext, id: str, invite_id: str) -> Reply:
    tenant, role = await _tenant_for_admin(ctx, id)
    ctx.audit.update(resource_type="invite", resource_id=_invite_id(invite_id))
    invite = await inv.revoke(ctx.db, kind=inv.TENANT, tenant_id=tenant.id, invite_id=invite_id, actor_role=role)
    return raw({"invite_id": invite.id, "revoked": True})


@router.get("/invites/{token}", summary="An org invite by its token", auth="public")
async def lookup_tenant_invite(ctx: RequestContext, token: str) -> Reply:
    invite = await inv.lookup(ctx.db, inv.TENANT, token)
    return data(
        {
            "email": invite.email,
            "tenant_name": invite.tenant_name,
            "role": invite.role,
            "expires_at": invite.expires_at,
            "expired": inv.is_expired(invite),
            "accepted": invite.accepted_at is not None,
        }
    )


@router.post(
    "/invites/{token}/accept",
    summary="Accept an org invite as the invited user; joins the organization and its default workspace",
    scope="org:write",
    action="tenant_invites.accept",
)
async def accept_tenant_invite(ctx: RequestContext, token: str) -> Reply:
    user_id, email = _caller_user(ctx)
    await _audit_invite(ctx, inv.TENANT, token)
    return raw(await inv.accept_tenant_invite(ctx.db, token, user_id=user_id, email=email))
