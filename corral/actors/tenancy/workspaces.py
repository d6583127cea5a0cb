"""Workspaces and projects: CRUD with the role rules of the specification.

Tenant owners and admins act as owner and admin of every workspace of their tenant;
everyone else needs a workspace membership. Viewers read only.
"""

from __future__ import annotations

from corral.errors import ApiError, conflict, forbidden, not_found
from corral.storage import Database, Transaction

from . import store
from .scopes import role_at_least
from .slugs import free_slug, slugify
from .store import ProjectRecord, WorkspaceRecord

WORKSPACE_NOT_FOUND = "workspace not found"
PROJECT_NOT_FOUND = "project not found"


def slug_taken(noun: str) -> ApiError:
    return conflict("SLUG_TAKEN", f"a {noun} with this slug already exists")


async def effective_role(
    db: Database, workspace: WorkspaceRecord, user_id: str | None, tenant_role: str | None
) -> str | None:
    """The caller's role in a workspace, counting tenant-wide ownership and administration."""
    if tenant_role in ("owner", "admin"):
        return tenant_role
    if user_id is None:
        return None
    return await store.workspace_members.role(db, workspace.id, user_id)


async def get_workspace(db: Database, tenant_id: str, workspace_id: str) -> WorkspaceRecord:
    workspace = await store.workspaces.find(db, tenant_id, workspace_id)
    if workspace is None:
        raise not_found(WORKSPACE_NOT_FOUND)
    return workspace


async def require_role(
    db: Database, workspace: WorkspaceRecord, user_id: str | None, tenant_role: str | None, minimum: str
) -> str:
    """The caller's role, or 404 when they cannot see the workspace, 403 when it is too low."""
    role = await effective_role(db, workspace, user_id, tenant_role)
    if role is None:
        raise not_found(WORKSPACE_NOT_FOUND)
    if not role_at_least(role, minimum):
        raise forbidden(f"requires the {minimum} role in this workspace; you are {role}")
    return role


async def list_workspaces(
    db: Database, tenant_id: str, user_id: str | None, tenant_role: str | None
) -> list[tuple[WorkspaceRecord, str]]:
    """The workspaces the caller sees, with their role in each."""
    if tenant_role in ("owner", "admin"):
        return [(workspace, str(tenant_role)) for workspace in await store.workspaces.list_for_tenant(db, tenant_id)]
    return await store.workspaces.list_for_member(db, tenant_id, user_id)


def open_workspace(tx: Transaction, tenant_id: str, name: str, slug: str, creator_id: str | None) -> WorkspaceRecord:
    """A new workspace with its default project; its creator (when a user) owns it."""
    workspace = store.workspaces.create(tx, tenant_id, name, slug)
    if creator_id is not None:
        store.workspace_members.add(tx, workspace.id, creator_id, "owner", creator_id)
    store.projects.create(tx, workspace, "Default", "default", is_default=True)
    return workspace


def free_workspace_slug(tx: Transaction, tenant_id: str, name: str) -> str:
    """A slug made from `name` that no workspace of the tenant has."""
    return free_slug(slugify(name, "workspace"), lambda slug: store.workspaces.slug_used(tx, tenant_id, slug))


def free_project_slug(tx: Transaction, workspace_id: str, name: str) -> str:
    """A slug made from `name` that no project of the workspace has."""
    return free_slug(slugify(name, "project"), lambda slug: store.projects.slug_used(tx, workspace_id, slug))


async def create_workspace(db: Database, tenant_id: str, name: str, slug: str | None, creator_id: str | None) -> WorkspaceRecord:
    def work(tx: Transaction) -> WorkspaceRecord:
        chosen = slug or free_workspace_slug(tx, tenant_id, name)
        if store.workspaces.slug_used(tx, tenant_id, chosen):
            raise slug_taken("workspace")
        return open_workspace(tx, tenant_id, name, chosen, creator_id)

    return await db.transaction(work)


async def update_workspace(db: Database, workspace: WorkspaceRecord, name: str | None, slug: str | None) -> WorkspaceRecord:
    def work(tx: Transaction) -> WorkspaceRecord:
        if slug is not None and slug != workspace.slug:
            if workspace.is_default:
                raise conflict("DEFAULT_WORKSPACE", "the default workspace keeps the slug default")
            if store.workspaces.slug_used(tx, workspace.tenant_id, slug):
                raise slug_taken("workspace")
        return store.workspaces.rename(tx, workspace.id, name or workspace.name, slug or workspace.slug)

    return await db.transaction(work)


async def delete_workspace(db: Database, workspace: WorkspaceRecord) -> None:
    if workspace.is_default:
        raise conflict("DEFAULT_WORKSPACE", "the default workspace cannot be deleted")
    await store.workspaces.delete(db, workspace.id)


# --- projects ------------------------------------------------------------------------


async def get_project(db: Database, tenant_id: str, project_id: str) -> ProjectRecord:
    project = await store.projects.find(db, tenant_id, project_id)
    if project is None:
        raise not_found(PROJECT_NOT_FOUND)
    return project


async def list_projects(db: Database, tenant_id: str, workspace_ids: list[str]) -> list[ProjectRecord]:
    return await store.projects.list_in(db, tenant_id, workspace_ids)


async def create_project(db: Database, workspace: WorkspaceRecord, name: str, slug: str | None) -> ProjectRecord:
    def work(tx: Transaction) -> ProjectRecord:
        chosen = slug or free_project_slug(tx, workspace.id, name)
        if store.projects.slug_used(tx, workspace.id, chosen):
            raise slug_taken("project")
        return store.projects.create(tx, workspace, name, chosen)

    return await db.transaction(work)


async def update_project(db: Database, project: ProjectRecord, name: str | None, slug: str | None) -> ProjectRecord:
    def work(tx: Transaction) -> ProjectRecord:
        if slug is not None and slug != project.slug:
            if project.is_default:
                raise conflict("DEFAULT_PROJECT", "the default project keeps the slug default")
            if store.projects.slug_used(tx, project.workspace_id, slug):
                raise slug_taken("project")
        return store.projects.rename(tx, project.id, name or project.name, slug or project.slug)

    return await db.transaction(work)


async def delete_project(db: Database, project: ProjectRecord) -> None:
    if project.is_default:
        raise conflict("DEFAULT_PROJECT", "the default project cannot be deleted")
    await store.projects.delete(db, project.id)
