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
from corral.storage import Database, Transaction

from . import store
from .scopes import role_at_least
from .store import WorkspaceMember, WorkspaceRecord

MEMBER_NOT_FOUND = "member not found"
MISSING_CODES = {"user_id": "MISSING_USER_ID", "role": "MISSING_ROLE", "email": "MISSING_EMAIL"}


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


def member_public(member: WorkspaceMember) -> dict[str, Any]:
    """A row of the member list (specification: workspace member)."""
    return {
        "user_id": member.user_id,
        "email": member.email,
        "name": member.name,
        "avatar_url": member.avatar_url,
        "role": member.role,
        "joined_at": member.joined_at,
        "added_by": member.added_by,
    }


def membership_public(member: WorkspaceMember) -> dict[str, Any]:
    """The add and update responses' shape."""
    return {
        "user_id": member.user_id,
        "workspace_id": member.workspace_id,
        "role": member.role,
        "joined_at": member.joined_at,
        "added_by": member.added_by,
    }


async def list_members(db: Database, workspace_id: str) -> list[WorkspaceMember]:
    return await store.workspace_members.list_for(db, workspace_id)


def _member(tx: Transaction, workspace_id: str, user_id: str) -> WorkspaceMember:
    """A membership this transaction just made or changed."""
    member = store.workspace_members.find(tx, workspace_id, user_id)
    assert member is not None
    return member


def insert_member(tx: Transaction, workspace: WorkspaceRecord, user_id: str, role: str, added_by: str | None) -> WorkspaceMember:
    """Add a tenant member to a workspace: `422 NOT_TENANT_MEMBER`, `409 ALREADY_MEMBER`."""
    if not store.tenant_members.is_member(tx, workspace.tenant_id, user_id):
        raise not_tenant_member()
    if not store.workspace_members.join(tx, workspace.id, user_id, role, added_by):
        raise already_member()
    return _member(tx, workspace.id, user_id)


def _is_sole_owner(tx: Transaction, workspace_id: str, current: WorkspaceMember) -> bool:
    return current.role == "owner" and store.workspace_members.owner_count(tx, workspace_id) <= 1


async def add_member(
    db: Database, workspace: WorkspaceRecord, user_id: str, role: str, *, actor_role: str, actor_id: str | None
) -> WorkspaceMember:
    check_owner_rule(actor_role, role)
    return await db.transaction(lambda tx: insert_member(tx, workspace, user_id, role, actor_id))


async def change_role(db: Database, workspace: WorkspaceRecord, user_id: str, role: str, *, actor_role: str) -> WorkspaceMember:
    def work(tx: Transaction) -> WorkspaceMember:
        # Owner changes of one workspace are serial, so two owners cannot demote each other at once.
        store.workspaces.lock(tx, workspace.id)
        current = store.workspace_members.find(tx, workspace.id, user_id)
        if current is None:
            raise not_found(MEMBER_NOT_FOUND)
        check_owner_rule(actor_role, current.role, role)
        if role != "owner" and _is_sole_owner(tx, workspace.id, current):
            raise last_owner()
        store.workspace_members.set_role(tx, workspace.id, user_id, role)
        return _member(tx, workspace.id, user_id)

    return await db.transaction(work)


async def remove_member(
    db: Database, workspace: WorkspaceRecord, user_id: str, *, actor_role: str, actor_id: str | None
) -> None:
    """Remove from the workspace only (tenant membership stays). Anyone may leave; removing
    someone else needs an admin, and an owner when that someone is an owner."""

    def work(tx: Transaction) -> None:
        leaving = user_id == actor_id
        if not leaving and not role_at_least(actor_role, "admin"):
            raise forbidden(f"requires the admin role in this workspace to remove members; you are {actor_role}")
        store.workspaces.lock(tx, workspace.id)
        current = store.workspace_members.find(tx, workspace.id, user_id)
        if current is None:
            raise not_found(MEMBER_NOT_FOUND)
        if not leaving:
            check_owner_rule(actor_role, current.role)
        if _is_sole_owner(tx, workspace.id, current):
            raise last_owner()
        store.workspace_members.remove(tx, workspace.id, user_id)

    await db.transaction(work)
