"""Workspace members: list, add, change role, remove, with the specification's role rules.

Viewers read the member list; admins add members, change their roles and remove them;
anything that touches the owner role (granting it, changing or removing an owner)
needs an owner, which is how ownership is transferred: an owner makes someone else
owner, then steps down. A workspace never loses its last owner (`409 LAST_OWNER`).
Tenant owners and admins act as owner and admin of every workspace (see
`workspaces.effective_role`); a member row is what the other rules count.
"""

from __future__ import annotations

from typing import Any

from corral.errors import ApiError, conflict, forbidden, not_found
from corral.storage import Database, Row, Transaction, utc_now_iso

from .scopes import role_at_least

MEMBER_NOT_FOUND = "member not found"
MISSING_CODES = {"user_id": "MISSING_USER_ID", "role": "MISSING_ROLE", "email": "MISSING_EMAIL"}

_MEMBER_SQL = (
    "SELECT m.workspace_id, m.user_id, m.role, m.joined_at, m.added_by, u.email, u.name, u.avatar_url"
    " FROM workspace_members m JOIN users u ON u.id = m.user_id"
)


def missing_field(name: str) -> ApiError:
    """422 with the specification's own code for a required membership field."""
    return ApiError(422, MISSING_CODES[name], f"{name} is required")


def already_member(where: str = "workspace") -> ApiError:
    return conflict("ALREADY_MEMBER", f"the user is already a member of this {where}")


def last_owner() -> ApiError:
    return conflict("LAST_OWNER", "a workspace cannot lose its last owner; make another member owner first")


def not_tenant_member() -> ApiError:
    return ApiError(
        422, "NOT_TENANT_MEMBER", "the user must join the organization before the workspace; invite them by email instead"
    )


def check_owner_rule(actor_role: str, *roles: str | None) -> None:
    """403 unless the actor is an owner whenever one of `roles` is the owner role."""
    if "owner" in roles and actor_role != "owner":
        raise forbidden("only an owner can grant the owner role or change or remove an owner")


def member_public(row: Row) -> dict[str, Any]:
    """A row of the member list (specification: workspace member)."""
    return {
        "user_id": row["user_id"],
        "email": row["email"],
        "name": row["name"],
        "avatar_url": row["avatar_url"],
        "role": row["role"],
        "joined_at": row["joined_at"],
        "added_by": row["added_by"],
    }


def membership_public(row: Row) -> dict[str, Any]:
    """The add and update responses' shape."""
    return {
        "user_id": row["user_id"],
        "workspace_id": row["workspace_id"],
        "role": row["role"],
        "joined_at": row["joined_at"],
        "added_by": row["added_by"],
    }


async def list_members(db: Database, workspace_id: str) -> list[Row]:
    return await db.fetch_all(_MEMBER_SQL + " WHERE m.workspace_id = ? ORDER BY m.joined_at, m.user_id", (workspace_id,))


def member_row(tx: Transaction, workspace_id: str, user_id: str) -> Row | None:
    return tx.fetch_one(_MEMBER_SQL + " WHERE m.workspace_id = ? AND m.user_id = ?", (workspace_id, user_id))


def is_tenant_member(tx: Transaction, tenant_id: str, user_id: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM tenant_members WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id)) is not None


def join_workspace(tx: Transaction, workspace_id: str, user_id: str, role: str, added_by: str | None) -> bool:
    """Insert the membership unless it exists (also when a concurrent request just made it);
    whether this call made it."""
    inserted = tx.execute(
        "INSERT INTO workspace_members (workspace_id, user_id, role, joined_at, added_by) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (workspace_id, user_id) DO NOTHING",
        (workspace_id, user_id, role, utc_now_iso(), added_by),
    )
    return inserted == 1


def join_tenant(tx: Transaction, tenant_id: str, user_id: str, role: str) -> bool:
    """As `join_workspace`, for the tenant."""
    inserted = tx.execute(
        "INSERT INTO tenant_members (tenant_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (tenant_id, user_id) DO NOTHING",
        (tenant_id, user_id, role, utc_now_iso()),
    )
    return inserted == 1


def insert_member(tx: Transaction, workspace: Row, user_id: str, role: str, added_by: str | None) -> Row:
    """Add a tenant member to a workspace: `422 NOT_TENANT_MEMBER`, `409 ALREADY_MEMBER`."""
    if not is_tenant_member(tx, workspace["tenant_id"], user_id):
        raise not_tenant_member()
    if not join_workspace(tx, workspace["id"], user_id, role, added_by):
        raise already_member()
    row = member_row(tx, workspace["id"], user_id)
    assert row is not None
    return row


def _lock_workspace(tx: Transaction, workspace_id: str) -> None:
    """Serialise owner changes of one workspace (a row lock on PostgreSQL; SQLite
    transactions are serial already), so two owners cannot demote each other at once."""
    tx.execute("UPDATE workspaces SET updated_at = updated_at WHERE id = ?", (workspace_id,))


def _is_sole_owner(tx: Transaction, workspace_id: str, current: Row) -> bool:
    if current["role"] != "owner":
        return False
    owners = tx.fetch_value("SELECT COUNT(*) FROM workspace_members WHERE workspace_id = ? AND role = 'owner'", (workspace_id,))
    return int(owners) <= 1


async def add_member(db: Database, workspace: Row, user_id: str, role: str, *, actor_role: str, actor_id: str | None) -> Row:
    check_owner_rule(actor_role, role)
    return await db.transaction(lambda tx: insert_member(tx, workspace, user_id, role, actor_id))


async def change_role(db: Database, workspace: Row, user_id: str, role: str, *, actor_role: str) -> Row:
    def work(tx: Transaction) -> Row:
        _lock_workspace(tx, workspace["id"])
        current = member_row(tx, workspace["id"], user_id)
        if current is None:
            raise not_found(MEMBER_NOT_FOUND)
        check_owner_rule(actor_role, current["role"], role)
        if role != "owner" and _is_sole_owner(tx, workspace["id"], current):
            raise last_owner()
        tx.execute(
            "UPDATE workspace_members SET role = ? WHERE workspace_id = ? AND user_id = ?", (role, workspace["id"], user_id)
        )
        row = member_row(tx, workspace["id"], user_id)
        assert row is not None
        return row

    return await db.transaction(work)


async def remove_member(db: Database, workspace: Row, user_id: str, *, actor_role: str, actor_id: str | None) -> None:
    """Remove from the workspace only (tenant membership stays). Anyone may leave; removing
    someone else needs an admin, and an owner when that someone is an owner."""

    def work(tx: Transaction) -> None:
        leaving = user_id == actor_id
        if not leaving and not role_at_least(actor_role, "admin"):
            raise forbidden(f"requires the admin role in this workspace to remove members; you are {actor_role}")
        _lock_workspace(tx, workspace["id"])
        current = member_row(tx, workspace["id"], user_id)
        if current is None:
            raise not_found(MEMBER_NOT_FOUND)
        if not leaving:
            check_owner_rule(actor_role, current["role"])
        if _is_sole_owner(tx, workspace["id"], current):
            raise last_owner()
        tx.execute("DELETE FROM workspace_members WHERE workspace_id = ? AND user_id = ?", (workspace["id"], user_id))

    await db.transaction(work)
