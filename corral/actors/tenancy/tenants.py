"""Tenants and users: the operator's bootstrap of an organisation and its owner."""

from __future__ import annotations

from dataclasses import dataclass

from corral.errors import ApiError, not_found
from corral.storage import Database, Transaction

from . import store
from .passwords import hash_password
from .store import ProjectRecord, TenantRecord, UserRecord, WorkspaceRecord


@dataclass(frozen=True)
class NewTenant:
    """What `create_tenant` made."""

    tenant: TenantRecord
    owner: UserRecord
    workspace: WorkspaceRecord
    project: ProjectRecord


def email_taken() -> ApiError:
    return ApiError(409, "EMAIL_TAKEN", "a user with this email already exists")


def insert_user(tx: Transaction, email: str, name: str | None, password_hash: str | None) -> UserRecord:
    """A new user: `409 EMAIL_TAKEN` when the address (in any case) has one."""
    if store.users.email_used(tx, email):
        raise email_taken()
    return store.users.create(tx, email, name, password_hash)


async def create_tenant(db: Database, name: str, owner_email: str, owner_password: str) -> NewTenant:
    """A tenant, its owner, and the default workspace and project the owner owns."""
    password_hash = await hash_password(owner_password)

    def work(tx: Transaction) -> NewTenant:
        tenant = store.tenants.create(tx, name)
        owner = insert_user(tx, owner_email, None, password_hash)
        store.tenant_members.add(tx, tenant.id, owner.id, "owner")
        workspace = store.workspaces.create(tx, tenant.id, "Default", "default", is_default=True)
        store.workspace_members.add(tx, workspace.id, owner.id, "owner", None)
        project = store.projects.create(tx, workspace, "Default", "default", is_default=True)
        return NewTenant(tenant, owner, workspace, project)

    return await db.transaction(work)


async def create_user(
    db: Database, email: str, password: str, name: str | None, tenant_id: str | None, role: str
) -> UserRecord:
    """A user, optionally joining a tenant (and its default workspace) with `role`."""
    password_hash = await hash_password(password)

    def work(tx: Transaction) -> UserRecord:
        if tenant_id is not None and not store.tenants.exists(tx, tenant_id):
            raise not_found("tenant not found")
        user = insert_user(tx, email, name, password_hash)
        if tenant_id is not None:
            store.tenant_members.add(tx, tenant_id, user.id, role)
            default = store.workspaces.default(tx, tenant_id)
            if default is not None:
                workspace_role = role if role in ("owner", "admin") else "member"
                store.workspace_members.add(tx, default.id, user.id, workspace_role, None)
        return user

    return await db.transaction(work)


async def list_tenants(db: Database) -> list[TenantRecord]:
    return await store.tenants.list_all(db)


async def get_tenant(db: Database, tenant_id: str) -> TenantRecord | None:
    return await store.tenants.load(db, tenant_id)


async def tenant_role(db: Database, tenant_id: str, user_id: str) -> str | None:
    """The user's role in the tenant; None when they are not a member."""
    return await store.tenant_members.role(db, tenant_id, user_id)
