"""Tenants and users: the operator's bootstrap of an organisation and its owner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError, not_found
from corral.ids import new_uuid
from corral.storage import Database, Row, Transaction, utc_now_iso

from .passwords import hash_password


@dataclass(frozen=True)
class NewTenant:
    tenant: Row
    owner: Row
    workspace: Row
    project: Row


def email_taken() -> ApiError:
    return ApiError(409, "EMAIL_TAKEN", "a user with this email already exists")


def insert_user(tx: Transaction, email: str, name: str | None, password_hash: str | None) -> Row:
    if tx.fetch_one("SELECT id FROM users WHERE email_lower = ?", (email.lower(),)):
        raise email_taken()
    now = utc_now_iso()
    row = {
        "id": new_uuid(),
        "email": email,
        "email_lower": email.lower(),
        "name": name,
        "avatar_url": None,
        "password_hash": password_hash,
        "created_at": now,
        "updated_at": now,
    }
    tx.insert("users", row)
    return row


def insert_workspace(tx: Transaction, tenant_id: str, name: str, slug: str, *, is_default: bool = False) -> Row:
    now = utc_now_iso()
    row = {
        "id": new_uuid(),
        "tenant_id": tenant_id,
        "name": name,
        "slug": slug,
        "is_default": int(is_default),
        "created_at": now,
        "updated_at": now,
    }
    tx.insert("workspaces", row)
    return row


def insert_project(tx: Transaction, workspace: Row, name: str, slug: str, *, is_default: bool = False) -> Row:
    now = utc_now_iso()
    row = {
        "id": new_uuid(),
        "tenant_id": workspace["tenant_id"],
        "workspace_id": workspace["id"],
        "name": name,
        "slug": slug,
        "is_default": int(is_default),
        "created_at": now,
        "updated_at": now,
    }
    tx.insert("projects", row)
    return row


def add_workspace_member(tx: Transaction, workspace_id: str, user_id: str, role: str, added_by: str | None) -> None:
    tx.execute(
        "INSERT INTO workspace_members (workspace_id, user_id, role, joined_at, added_by) VALUES (?, ?, ?, ?, ?)",
        (workspace_id, user_id, role, utc_now_iso(), added_by),
    )


def add_tenant_member(tx: Transaction, tenant_id: str, user_id: str, role: str) -> None:
    tx.execute(
        "INSERT INTO tenant_members (tenant_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)",
        (tenant_id, user_id, role, utc_now_iso()),
    )


async def create_tenant(db: Database, name: str, owner_email: str, owner_password: str) -> NewTenant:
    """A tenant, its owner, and the default workspace and project the owner owns."""
    password_hash = await hash_password(owner_password)

    def work(tx: Transaction) -> NewTenant:
        now = utc_now_iso()
        tenant: Row = {"id": new_uuid(), "name": name, "custom_domain": None, "sandbox_limit": 10, "created_at": now, "updated_at": now}
        tx.insert("tenants", tenant)
        owner = insert_user(tx, owner_email, None, password_hash)
        add_tenant_member(tx, tenant["id"], owner["id"], "owner")
        workspace = insert_workspace(tx, tenant["id"], "Default", "default", is_default=True)
        add_workspace_member(tx, workspace["id"], owner["id"], "owner", None)
        project = insert_project(tx, workspace, "Default", "default", is_default=True)
        return NewTenant(tenant, owner, workspace, project)

    return await db.transaction(work)


async def create_user(
    db: Database, email: str, password: str, name: str | None, tenant_id: str | None, role: str
) -> Row:
    """A user, optionally joining a tenant (and its default workspace) with `role`."""
    password_hash = await hash_password(password)

    def work(tx: Transaction) -> Row:
        if tenant_id is not None and not tx.fetch_one("SELECT id FROM tenants WHERE id = ?", (tenant_id,)):
            raise not_found("tenant not found")
        user = insert_user(tx, email, name, password_hash)
        if tenant_id is not None:
            add_tenant_member(tx, tenant_id, user["id"], role)
            default = tx.fetch_one("SELECT id FROM workspaces WHERE tenant_id = ? AND is_default = 1", (tenant_id,))
            if default:
                workspace_role = role if role in ("owner", "admin") else "member"
                add_workspace_member(tx, default["id"], user["id"], workspace_role, None)
        return user

    return await db.transaction(work)


async def list_tenants(db: Database) -> list[Row]:
    return await db.fetch_all("SELECT * FROM tenants ORDER BY created_at, id")


async def get_tenant(db: Database, tenant_id: str) -> Row | None:
    return await db.fetch_one("SELECT * FROM tenants WHERE id = ?", (tenant_id,))


async def tenant_role(db: Database, tenant_id: str, user_id: str) -> str | None:
    value = await db.fetch_value(
        "SELECT role FROM tenant_members WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id)
    )
    return None if value is None else str(value)


def tenant_summary(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "created_at": row["created_at"]}
