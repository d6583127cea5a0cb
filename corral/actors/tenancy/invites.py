"""Workspace and org (tenant) invites: issue, list, revoke, look up by token, accept.

A token is 256 random bits (43 URL-safe characters) shown once, in the create
response's `invite_url` and in the invite e-mail; the store keeps its SHA-256
digest only. Invites expire after `Settings.invite_ttl_seconds` (7 days). A new
invite for the same address and workspace (or org) supersedes the pending one,
which then answers `REVOKED`: re-inviting is how a link is re-sent.

Accepting checks the caller's e-mail against the invite's (case-insensitively) and
creates every membership it implies in one transaction, so a new org user never
ends up in a workspace without the tenant or the other way round.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError, conflict, not_found
from corral.ids import prefixed, random_token
from corral.storage import Database, Transaction, iso_in, utc_now_iso

from . import store
from .branding import get_branding
from .mail import send_mail
from .members import check_owner_rule, insert_member
from .services import TenancyServices
from .store import InviteRecord, NamedInvite, TenantRecord, WorkspaceMember, WorkspaceRecord
from .store.invites import TENANT, WORKSPACE
from .white_label import invite_base_url

INVITE_NOT_FOUND = "invite not found"
INVITE_ID = re.compile(r"^inv_[0-9a-z]{26}$")
PRODUCT_PATHS = {WORKSPACE: "/workspace-invites/", TENANT: "/invites/"}
"""Where the product frontend shows an invite (specification: invite links)."""
MAX_TOKEN_LENGTH = 256


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invalid_token() -> ApiError:
    return ApiError(400, "INVALID_TOKEN", "invite token not found or expired")


def revoked() -> ApiError:
    return ApiError(400, "REVOKED", "this invite was revoked")


def already_accepted() -> ApiError:
    return conflict("ALREADY_ACCEPTED", "this invite was already accepted")


def email_mismatch() -> ApiError:
    return ApiError(422, "EMAIL_MISMATCH", "this invite was sent to another e-mail address; sign in as the invited user")


def is_expired(invite: InviteRecord, now: str | None = None) -> bool:
    return invite.expires_at <= (now or utc_now_iso())


@dataclass(frozen=True)
class IssuedInvite:
    """A new invite with its token, which is shown once and never stored."""

    invite: InviteRecord
    token: str
    url: str


@dataclass(frozen=True)
class WorkspaceInviteOutcome:
    """Either an invite was issued, or the address belonged to a tenant member who was added."""

    invite: IssuedInvite | None = None
    member: WorkspaceMember | None = None


def invite_url(platform: TenancyServices, kind: str, token: str, custom_domain: str | None) -> str:
    return f"{invite_base_url(platform.settings, custom_domain)}{PRODUCT_PATHS[kind]}{token}"


def workspace_invite_public(invite: InviteRecord) -> dict[str, Any]:
    return {
        "id": invite.id,
        "workspace_id": invite.workspace_id,
        "tenant_id": invite.tenant_id,
        "email": invite.email,
        "role": invite.role,
        "invited_by": invite.invited_by,
        "expires_at": invite.expires_at,
        "accepted_at": invite.accepted_at,
        "inserted_at": invite.inserted_at,
    }


def tenant_invite_public(invite: InviteRecord) -> dict[str, Any]:
    return {
        "invite_id": invite.id,
        "email": invite.email,
        "role": invite.role,
        "expires_at": invite.expires_at,
        "invited_by": invite.invited_by,
        "inserted_at": invite.inserted_at,
    }


# --- issuing ---------------------------------------------------------------------------


def _insert_invite(
    tx: Transaction, platform: TenancyServices, *, kind: str, tenant_id: str, workspace_id: str | None, email: str, role: str, invited_by: str | None
) -> tuple[InviteRecord, str]:
    """Supersede the address's pending invite to the same place, then insert a new one."""
    now = utc_now_iso()
    store.invites.supersede(tx, kind, workspace_id if kind == WORKSPACE else tenant_id, email, now)
    token = random_token(32)
    invite = InviteRecord(
        id=prefixed("inv"),
        kind=kind,
        tenant_id=tenant_id,
        workspace_id=workspace_id,
        email=email,
        email_lower=email.lower(),
        role=role,
        token_digest=token_digest(token),
        invited_by=invited_by,
        expires_at=iso_in(platform.settings.invite_ttl_seconds),
        accepted_at=None,
        accepted_by=None,
        revoked_at=None,
        inserted_at=now,
    )
    store.invites.create(tx, invite)
    return invite, token


async def _inviter_name(db: Database, user_id: str | None) -> str | None:
    if user_id is None:
        return None
    user = await store.users.load(db, user_id)
    return None if user is None else str(user.name or user.email)


async def invite_to_workspace(
    platform: TenancyServices, workspace: WorkspaceRecord, email: str, role: str, *, actor_role: str, actor_id: str | None
) -> WorkspaceInviteOutcome:
    """Invite an address to a workspace; an address of a tenant member is added at once
    (no e-mail), `409 ALREADY_MEMBER` when already in the workspace."""
    check_owner_rule(actor_role, role)

    def work(tx: Transaction) -> WorkspaceInviteOutcome | tuple[InviteRecord, str]:
        user = store.users.member_by_email(tx, workspace.tenant_id, email)
        if user is not None:
            return WorkspaceInviteOutcome(member=insert_member(tx, workspace, user.id, role, actor_id))
        return _insert_invite(
            tx, platform, kind=WORKSPACE, tenant_id=workspace.tenant_id, workspace_id=workspace.id,
            email=email, role=role, invited_by=actor_id,
        )

    done = await platform.db.transaction(work)
    if isinstance(done, WorkspaceInviteOutcome):
        return done
    invite, token = done
    tenant = await store.tenants.load(platform.db, workspace.tenant_id)
    assert tenant is not None
    url = invite_url(platform, WORKSPACE, token, tenant.custom_domain)
    inviter = await _inviter_name(platform.db, actor_id)
    brand = await get_branding(platform.db, tenant.id)
    await send_mail(
        platform,
        email,
        f"You are invited to the {workspace.name} workspace of {brand.name}",
        _mail_body(
            f"{inviter or 'A team mate'} invited you to join the {workspace.name} workspace of {brand.name}"
            f" as {role}.",
            url,
            invite.expires_at,
            brand.support_email,
        ),
    )
    return WorkspaceInviteOutcome(invite=IssuedInvite(invite, token, url))


async def invite_to_tenant(
    platform: TenancyServices, tenant: TenantRecord, email: str, role: str, *, actor_role: str, actor_id: str | None
) -> IssuedInvite:
    """Invite an address to the org; `409 ALREADY_MEMBER` when it belongs to a member."""
    check_owner_rule(actor_role, role)

    def work(tx: Transaction) -> tuple[InviteRecord, str]:
        if store.users.member_by_email(tx, tenant.id, email) is not None:
            raise ApiError(409, "ALREADY_MEMBER", "the user is already a member of this organization")
        return _insert_invite(tx, platform, kind=TENANT, tenant_id=tenant.id, workspace_id=None, email=email, role=role, invited_by=actor_id)

    invite, token = await platform.db.transaction(work)
    url = invite_url(platform, TENANT, token, tenant.custom_domain)
    inviter = await _inviter_name(platform.db, actor_id)
    brand = await get_branding(platform.db, tenant.id)
    await send_mail(
        platform,
        email,
        f"You are invited to join {brand.name}",
        _mail_body(
            f"{inviter or 'A team mate'} invited you to join {brand.name} as {role}.", url, invite.expires_at, brand.support_email
        ),
    )
    return IssuedInvite(invite, token, url)


def _mail_body(sentence: str, url: str, expires_at: str, support_email: str | None = None) -> str:
    """The invite e-mail's text; a tenant's branding gives its name and support address."""
    support = f"Questions? Write to {support_email}.\n" if support_email else ""
    return (
        f"{sentence}\n\n"
        f"Open this link to accept the invite:\n{url}\n\n"
        f"Sign in with this e-mail address to accept. The link expires at {expires_at} (UTC).\n"
        "If you did not expect this invite, you can ignore this message.\n"
        f"{support}"
    )


# --- listing and revoking --------------------------------------------------------------


async def list_pending(db: Database, *, kind: str, tenant_id: str, workspace_id: str | None = None) -> list[InviteRecord]:
    """Invites neither accepted, revoked nor expired, oldest first."""
    return await store.invites.pending(db, kind, tenant_id, workspace_id if kind == WORKSPACE else tenant_id)


async def revoke(
    db: Database, *, kind: str, tenant_id: str, invite_id: str, actor_role: str, workspace_id: str | None = None
) -> InviteRecord:
    """Revoke a pending invite (idempotent); `409 ALREADY_ACCEPTED` once accepted."""

    def work(tx: Transaction) -> InviteRecord:
        invite = store.invites.find(tx, kind, tenant_id, invite_id)
        if invite is None or (kind == WORKSPACE and invite.workspace_id != workspace_id):
            raise not_found(INVITE_NOT_FOUND)
        if invite.accepted_at is not None:
            raise already_accepted()
        check_owner_rule(actor_role, invite.role)
        if invite.revoked_at is None:
            store.invites.revoke(tx, invite_id, utc_now_iso())
        found = store.invites.load(tx, invite_id)
        assert found is not None
        return found

    return await db.transaction(work)


# --- the invitee's side ----------------------------------------------------------------


def _digest_of(token: str) -> str | None:
    """The digest a token is looked up by; None for a token no invite can have."""
    return token_digest(token) if token and len(token) <= MAX_TOKEN_LENGTH else None


async def find_by_token(db: Database, kind: str, token: str) -> NamedInvite | None:
    digest = _digest_of(token)
    return None if digest is None else await store.invites.by_token(db, kind, digest)


async def lookup(db: Database, kind: str, token: str) -> NamedInvite:
    """The invite behind a token, expired or accepted ones included: `INVALID_TOKEN` when
    there is none, `REVOKED` when it was revoked."""
    invite = await find_by_token(db, kind, token)
    if invite is None:
        raise invalid_token()
    if invite.revoked_at is not None:
        raise revoked()
    return invite


def _claim(tx: Transaction, kind: str, token: str, user_id: str, email: str | None) -> NamedInvite:
    """Check the invite can be accepted by this caller and mark it accepted."""
    digest = _digest_of(token)
    invite = None if digest is None else store.invites.by_token_in(tx, kind, digest)
    if invite is None:
        raise invalid_token()
    if invite.revoked_at is not None:
        raise revoked()
    if invite.accepted_at is not None:
        raise already_accepted()
    now = utc_now_iso()
    if is_expired(invite, now):
        raise invalid_token()
    if email is None or email.lower() != invite.email_lower:
        raise email_mismatch()
    if not store.invites.claim(tx, invite.id, user_id, now):  # accepted or revoked by a concurrent request since the read
        raise already_accepted()
    return invite


async def accept_workspace_invite(db: Database, token: str, *, user_id: str, email: str | None) -> dict[str, Any]:
    """Join the tenant (role `member`, when not in it yet) and the workspace, atomically.
    A caller already in the workspace keeps the role they have."""

    def work(tx: Transaction) -> dict[str, Any]:
        invite = _claim(tx, WORKSPACE, token, user_id, email)
        assert invite.workspace_id is not None
        store.tenant_members.join(tx, invite.tenant_id, user_id, "member")
        store.workspace_members.join(tx, invite.workspace_id, user_id, invite.role, invite.invited_by)
        member = store.workspace_members.find(tx, invite.workspace_id, user_id)
        assert member is not None
        return {"accepted": True, "workspace_id": invite.workspace_id, "tenant_id": invite.tenant_id, "role": member.role}

    return await db.transaction(work)


async def accept_tenant_invite(db: Database, token: str, *, user_id: str, email: str | None) -> dict[str, Any]:
    """Join the tenant with the invite's role and its default workspace (as owner or admin
    for those roles, else member), as `POST /admin/users` does. A caller already in the
    tenant keeps what they have."""

    def work(tx: Transaction) -> dict[str, Any]:
        invite = _claim(tx, TENANT, token, user_id, email)
        if store.tenant_members.join(tx, invite.tenant_id, user_id, invite.role):
            default = store.workspaces.default(tx, invite.tenant_id)
            if default is not None:
                workspace_role = invite.role if invite.role in ("owner", "admin") else "member"
                store.workspace_members.join(tx, default.id, user_id, workspace_role, invite.invited_by)
        return {"accepted": True, "tenant_id": invite.tenant_id, "tenant": {"id": invite.tenant_id, "name": invite.tenant_name}}

    return await db.transaction(work)
