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
from typing import TYPE_CHECKING, Any

from corral.errors import ApiError, conflict, not_found
from corral.ids import prefixed, random_token
from corral.storage import Database, Row, Transaction, iso_in, utc_now_iso

from .mail import send_mail
from .members import check_owner_rule, insert_member, join_tenant, join_workspace, member_row
from .white_label import invite_base_url

if TYPE_CHECKING:
    from corral.actors.tenancy.services import TenancyServices

WORKSPACE = "workspace"
TENANT = "tenant"
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


def is_expired(row: Row, now: str | None = None) -> bool:
    return str(row["expires_at"]) <= (now or utc_now_iso())


@dataclass(frozen=True)
class IssuedInvite:
    row: Row
    token: str
    url: str


@dataclass(frozen=True)
class WorkspaceInviteOutcome:
    """Either an invite was issued, or the address belonged to a tenant member who was added."""

    invite: IssuedInvite | None = None
    member: Row | None = None


def invite_url(platform: TenancyServices, kind: str, token: str, custom_domain: str | None) -> str:
    return f"{invite_base_url(platform.settings, custom_domain)}{PRODUCT_PATHS[kind]}{token}"


def workspace_invite_public(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "workspace_id": row["workspace_id"],
        "tenant_id": row["tenant_id"],
        "email": row["email"],
        "role": row["role"],
        "invited_by": row["invited_by"],
        "expires_at": row["expires_at"],
        "accepted_at": row["accepted_at"],
        "inserted_at": row["inserted_at"],
    }


def tenant_invite_public(row: Row) -> dict[str, Any]:
    return {
        "invite_id": row["id"],
        "email": row["email"],
        "role": row["role"],
        "expires_at": row["expires_at"],
        "invited_by": row["invited_by"],
        "inserted_at": row["inserted_at"],
    }


# --- issuing ---------------------------------------------------------------------------


def _insert_invite(
    tx: Transaction, platform: TenancyServices, *, kind: str, tenant_id: str, workspace_id: str | None, email: str, role: str, invited_by: str | None
) -> tuple[Row, str]:
    """Supersede the address's pending invite to the same place, then insert a new one."""
    now = utc_now_iso()
    place = "workspace_id = ?" if kind == WORKSPACE else "tenant_id = ?"
    tx.execute(
        f"UPDATE invites SET revoked_at = ? WHERE kind = ? AND {place} AND email_lower = ?"
        " AND accepted_at IS NULL AND revoked_at IS NULL",
        (now, kind, workspace_id if kind == WORKSPACE else tenant_id, email.lower()),
    )
    token = random_token(32)
    row: Row = {
        "id": prefixed("inv"),
        "kind": kind,
        "tenant_id": tenant_id,
        "workspace_id": workspace_id,
        "email": email,
        "email_lower": email.lower(),
        "role": role,
        "token_digest": token_digest(token),
        "invited_by": invited_by,
        "expires_at": iso_in(platform.settings.invite_ttl_seconds),
        "accepted_at": None,
        "accepted_by": None,
        "revoked_at": None,
        "inserted_at": now,
    }
    tx.insert("invites", row)
    return row, token


def _tenant_member_by_email(tx: Transaction, tenant_id: str, email: str) -> Row | None:
    return tx.fetch_one(
        "SELECT u.id FROM users u JOIN tenant_members m ON m.user_id = u.id AND m.tenant_id = ? WHERE u.email_lower = ?",
        (tenant_id, email.lower()),
    )


async def _inviter_name(db: Database, user_id: str | None) -> str | None:
    if user_id is None:
        return None
    row = await db.fetch_one("SELECT email, name FROM users WHERE id = ?", (user_id,))
    return None if row is None else str(row["name"] or row["email"])


async def invite_to_workspace(
    platform: TenancyServices, workspace: Row, email: str, role: str, *, actor_role: str, actor_id: str | None
) -> WorkspaceInviteOutcome:
    """Invite an address to a workspace; an address of a tenant member is added at once
    (no e-mail), `409 ALREADY_MEMBER` when already in the workspace."""
    check_owner_rule(actor_role, role)

    def work(tx: Transaction) -> tuple[Row | None, Row | None, str]:
        user = _tenant_member_by_email(tx, workspace["tenant_id"], email)
        if user is not None:
            return None, insert_member(tx, workspace, user["id"], role, actor_id), ""
        row, token = _insert_invite(
            tx, platform, kind=WORKSPACE, tenant_id=workspace["tenant_id"], workspace_id=workspace["id"],
            email=email, role=role, invited_by=actor_id,
        )
        return row, None, token

    row, member, token = await platform.db.transaction(work)
    if member is not None:
        return WorkspaceInviteOutcome(member=member)
    assert row is not None
    tenant = await platform.db.fetch_one("SELECT name, custom_domain FROM tenants WHERE id = ?", (workspace["tenant_id"],))
    assert tenant is not None
    url = invite_url(platform, WORKSPACE, token, tenant["custom_domain"])
    inviter = await _inviter_name(platform.db, actor_id)
    await send_mail(
        platform,
        email,
        f"You are invited to the {workspace['name']} workspace of {tenant['name']}",
        _mail_body(
            f"{inviter or 'A team mate'} invited you to join the {workspace['name']} workspace of {tenant['name']}"
            f" as {role}.",
            url,
            row["expires_at"],
        ),
    )
    return WorkspaceInviteOutcome(invite=IssuedInvite(row, token, url))


async def invite_to_tenant(platform: TenancyServices, tenant: Row, email: str, role: str, *, actor_role: str, actor_id: str | None) -> IssuedInvite:
    """Invite an address to the org; `409 ALREADY_MEMBER` when it belongs to a member."""
    check_owner_rule(actor_role, role)

    def work(tx: Transaction) -> tuple[Row, str]:
        if _tenant_member_by_email(tx, tenant["id"], email) is not None:
            raise ApiError(409, "ALREADY_MEMBER", "the user is already a member of this organization")
        return _insert_invite(tx, platform, kind=TENANT, tenant_id=tenant["id"], workspace_id=None, email=email, role=role, invited_by=actor_id)

    row, token = await platform.db.transaction(work)
    url = invite_url(platform, TENANT, token, tenant["custom_domain"])
    inviter = await _inviter_name(platform.db, actor_id)
    await send_mail(
        platform,
        email,
        f"You are invited to join {tenant['name']}",
        _mail_body(f"{inviter or 'A team mate'} invited you to join {tenant['name']} as {role}.", url, row["expires_at"]),
    )
    return IssuedInvite(row, token, url)


def _mail_body(sentence: str, url: str, expires_at: str) -> str:
    return (
        f"{sentence}\n\n"
        f"Open this link to accept the invite:\n{url}\n\n"
        f"Sign in with this e-mail address to accept. The link expires at {expires_at} (UTC).\n"
        "If you did not expect this invite, you can ignore this message.\n"
    )


# --- listing and revoking --------------------------------------------------------------


async def list_pending(db: Database, *, kind: str, tenant_id: str, workspace_id: str | None = None) -> list[Row]:
    """Invites neither accepted, revoked nor expired, oldest first."""
    place, value = ("workspace_id = ?", workspace_id) if kind == WORKSPACE else ("tenant_id = ?", tenant_id)
    return await db.fetch_all(
        f"SELECT * FROM invites WHERE kind = ? AND tenant_id = ? AND {place}"
        " AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ? ORDER BY inserted_at, id",
        (kind, tenant_id, value, utc_now_iso()),
    )


async def revoke(db: Database, *, kind: str, tenant_id: str, invite_id: str, actor_role: str, workspace_id: str | None = None) -> Row:
    """Revoke a pending invite (idempotent); `409 ALREADY_ACCEPTED` once accepted."""

    def work(tx: Transaction) -> Row:
        row = tx.fetch_one("SELECT * FROM invites WHERE id = ? AND kind = ? AND tenant_id = ?", (invite_id, kind, tenant_id))
        if row is None or (kind == WORKSPACE and row["workspace_id"] != workspace_id):
            raise not_found(INVITE_NOT_FOUND)
        if row["accepted_at"] is not None:
            raise already_accepted()
        check_owner_rule(actor_role, row["role"])
        if row["revoked_at"] is None:
            tx.execute("UPDATE invites SET revoked_at = ? WHERE id = ? AND accepted_at IS NULL", (utc_now_iso(), invite_id))
        found = tx.fetch_one("SELECT * FROM invites WHERE id = ?", (invite_id,))
        assert found is not None
        return found

    return await db.transaction(work)


# --- the invitee's side ----------------------------------------------------------------

_BY_TOKEN = (
    "SELECT i.*, t.name AS tenant_name, w.name AS workspace_name FROM invites i"
    " JOIN tenants t ON t.id = i.tenant_id LEFT JOIN workspaces w ON w.id = i.workspace_id"
    " WHERE i.token_digest = ? AND i.kind = ?"
)


async def find_by_token(db: Database, kind: str, token: str) -> Row | None:
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return await db.fetch_one(_BY_TOKEN, (token_digest(token), kind))


async def lookup(db: Database, kind: str, token: str) -> Row:
    """The invite behind a token, expired or accepted ones included: `INVALID_TOKEN` when
    there is none, `REVOKED` when it was revoked."""
    row = await find_by_token(db, kind, token)
    if row is None:
        raise invalid_token()
    if row["revoked_at"] is not None:
        raise revoked()
    return row


def _claim(tx: Transaction, kind: str, token: str, user_id: str, email: str | None) -> Row:
    """Check the invite can be accepted by this caller and mark it accepted."""
    row = tx.fetch_one(_BY_TOKEN, (token_digest(token), kind)) if token and len(token) <= MAX_TOKEN_LENGTH else None
    if row is None:
        raise invalid_token()
    if row["revoked_at"] is not None:
        raise revoked()
    if row["accepted_at"] is not None:
        raise already_accepted()
    now = utc_now_iso()
    if is_expired(row, now):
        raise invalid_token()
    if email is None or email.lower() != row["email_lower"]:
        raise email_mismatch()
    claimed = tx.execute(
        "UPDATE invites SET accepted_at = ?, accepted_by = ? WHERE id = ? AND accepted_at IS NULL AND revoked_at IS NULL",
        (now, user_id, row["id"]),
    )
    if claimed != 1:  # accepted or revoked by a concurrent request since the read
        raise already_accepted()
    return row


async def accept_workspace_invite(db: Database, token: str, *, user_id: str, email: str | None) -> dict[str, Any]:
    """Join the tenant (role `member`, when not in it yet) and the workspace, atomically.
    A caller already in the workspace keeps the role they have."""

    def work(tx: Transaction) -> dict[str, Any]:
        row = _claim(tx, WORKSPACE, token, user_id, email)
        join_tenant(tx, row["tenant_id"], user_id, "member")
        join_workspace(tx, row["workspace_id"], user_id, row["role"], row["invited_by"])
        member = member_row(tx, row["workspace_id"], user_id)
        assert member is not None
        return {"accepted": True, "workspace_id": row["workspace_id"], "tenant_id": row["tenant_id"], "role": member["role"]}

    return await db.transaction(work)


async def accept_tenant_invite(db: Database, token: str, *, user_id: str, email: str | None) -> dict[str, Any]:
    """Join the tenant with the invite's role and its default workspace (as owner or admin
    for those roles, else member), as `POST /admin/users` does. A caller already in the
    tenant keeps what they have."""

    def work(tx: Transaction) -> dict[str, Any]:
        row = _claim(tx, TENANT, token, user_id, email)
        if join_tenant(tx, row["tenant_id"], user_id, row["role"]):
            default = tx.fetch_one("SELECT id FROM workspaces WHERE tenant_id = ? AND is_default = 1", (row["tenant_id"],))
            if default is not None:
                workspace_role = row["role"] if row["role"] in ("owner", "admin") else "member"
                join_workspace(tx, default["id"], user_id, workspace_role, row["invited_by"])
        return {"accepted": True, "tenant_id": row["tenant_id"], "tenant": {"id": row["tenant_id"], "name": row["tenant_name"]}}

    return await db.transaction(work)
