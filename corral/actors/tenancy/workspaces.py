"""Workspaces and projects: CRUD with the role rules of the specification.

Tenant owners and admins act as owner and admin of every workspace of their tenant;
everyone else needs a workspace membership. Viewers read only.
"""

from __future__ import annotations

from corral.errors import ApiError, conflict, forbidden, not_found
from corral.storage import Database, Row, Transaction, utc_now_iso

from .scopes import role_at_least
from .slugs import slugify
from .tenants import add_workspace_member, insert_project, insert_workspace

WORKSPACE_NOT_FOUND = "workspace not found"
PROJECT_NOT_FOUND = "project not found"


def slug_taken(noun: str) -> ApiError:
    return conflict("SLUG_TAKEN", f"a {noun} with this slug already exists")


async def effective_role(db: Database, workspace: Row, user_id: str | None, tenant_role: str | None) -> str | None:
    """The caller's role in a workspace, counting tenant-wide ownership and administration."""
    if tenant_role in ("owner", "admin"):
        return tenant_role
    if user_id is None:
        return None
    value = await db.fetch_value(
        "SELECT role FROM workspace_members WHERE workspace_id = ? AND user_id = ?", (workspace["id"], user_id)
    )
    return None if value is None else str(value)


async def get_workspace(db: Database, tenant_id: str, workspace_id: str) -> Row:
    row = await db.fetch_one("SELECT * FROM workspaces WHERE id = ? AND tenant_id = ?", (workspace_id, tenant_id))
    if row is None:
        raise not_found(WORKSPACE_NOT_FOUND)
    return row


async def require_role(
    db: Database, workspace: Row, user_id: str | None, tenant_role: str | None, minimum: str
) -> str:
    """The caller's role, or 404 when they cannot see the workspace, 403 when it is too low."""
    role = await effective_role(db, workspace, user_id, tenant_role)
    if role is None:
        raise not_found(WORKSPACE_NOT_FOUND)
    if not role_at_least(role, minimum):
        raise forbidden(f"requires the {minimum} role in this workspace; you are {role}")
    return role


async def list_workspaces(db: Database, tenant_id: str, user_id: str | None, tenant_role: str | None) -> list[tuple[Row, str]]:
    if tenant_role in ("owner", "admin"):
        rows = await db.fetch_all("SELECT * FROM workspaces WHERE tenant_id = ? ORDER BY created_at, id", (tenant_id,))
        return [(row, str(tenant_role)) for row in rows]
    rows = await db.fetch_all(
        "SELECT w.*, m.role AS member_role FROM workspaces w JOIN workspace_members m ON m.workspace_id = w.id"
        " WHERE w.tenant_id = ? AND m.user_id = ? ORDER BY w.created_at, w.id",
        (tenant_id, user_id),
    )
    return [(row, row["member_role"]) for row in rows]


async def create_workspace(db: Database, tenant_id: str, name: str, slug: str | None, creator_id: str | None) -> Row:
    def work(tx: Transaction) -> Row:
        chosen = slug or _free_slug(tx, "SELECT 1 FROM workspaces WHERE tenant_id = ? AND slug = ?", tenant_id, slugify(name, "workspace"))
        if tx.fetch_one("SELECT 1 FROM workspaces WHERE tenant_id = ? AND slug = ?", (tenant_id, chosen)):
            raise slug_taken("workspace")
        workspace = insert_workspace(tx, tenant_id, name, chosen)
        if creator_id is not None:
            add_workspace_member(tx, workspace["id"], creator_id, "owner", creator_id)
        insert_project(tx, workspace, "Default", "default", is_default=True)
        return workspace

    return await db.transaction(work)


def _free_slug(tx: Transaction, exists_sql: str, scope_id: str, base: str) -> str:
    candidate, n = base, 1
    while tx.fetch_one(exists_sql, (scope_id, candidate)):
        n += 1
        candidate = f"{base[:58]}-{n}"
    return candidate


async def update_workspace(db: Database, workspace: Row, name: str | None, slug: str | None) -> Row:
    def work(tx: Transaction) -> Row:
        if slug is not None and slug != workspace["slug"]:
            if workspace["is_default"]:
                raise conflict("DEFAULT_WORKSPACE", "the default workspace keeps the slug default")
            if tx.fetch_one("SELECT 1 FROM workspaces WHERE tenant_id = ? AND slug = ?", (workspace["tenant_id"], slug)):
                raise slug_taken("workspace")
        tx.execute(
            "UPDATE workspaces SET name = ?, slug = ?, updated_at = ? WHERE id = ?",
            (name or workspace["name"], slug or workspace["slug"], utc_now_iso(), workspace["id"]),
        )
        row = tx.fetch_one("SELECT * FROM workspaces WHERE id = ?", (workspace["id"],))
        assert row is not None
        return row

    return await db.transaction(work)


async def delete_workspace(db: Database, workspace: Row) -> None:
    if workspace["is_default"]:
        raise conflict("DEFAULT_WORKSPACE", "the default workspace cannot be deleted")
    await db.execute("DELETE FROM workspaces WHERE id = ?", (workspace["id"],))


# --- projects ------------------------------------------------------------------------


async def get_project(db: Database, tenant_id: str, project_id: str) -> Row:
    row = await db.fetch_one("SELECT * FROM projects WHERE id = ? AND tenant_id = ?", (project_id, tenant_id))
    if row is None:
        raise not_found(PROJECT_NOT_FOUND)
    return row


async def list_projects(db: Database, tenant_id: str, workspace_ids: list[str]) -> list[Row]:
    if not workspace_ids:
        return []
    marks = ", ".join("?" for _ in workspace_ids)
    return await db.fetch_all(
        f"SELECT * FROM projects WHERE tenant_id = ? AND workspace_id IN ({marks}) ORDER BY created_at, id",
        (tenant_id, *workspace_ids),
    )


async def create_project(db: Database, workspace: Row, name: str, slug: str | None) -> Row:
    def work(tx: Transaction) -> Row:
        chosen = slug or _free_slug(tx, "SELECT 1 FROM projects WHERE workspace_id = ? AND slug = ?", workspace["id"], slugify(name, "project"))
        if tx.fetch_one("SELECT 1 FROM projects WHERE workspace_id = ? AND slug = ?", (workspace["id"], chosen)):
            raise slug_taken("project")
        return insert_project(tx, workspace, name, chosen)

    return await db.transaction(work)


async def update_project(db: Database, project: Row, name: str | None, slug: str | None) -> Row:
    def work(tx: Transaction) -> Row:
        if slug is not None and slug != project["slug"]:
            if project["is_default"]:
                raise conflict("DEFAULT_PROJECT", "the default project keeps the slug default")
            if tx.fetch_one("SELECT 1 FROM projects WHERE workspace_id = ? AND slug = ?", (project["workspace_id"], slug)):
                raise slug_taken("project")
        tx.execute(
            "UPDATE projects SET name = ?, slug = ?, updated_at = ? WHERE id = ?",
            (name or project["name"], slug or project["slug"], utc_now_iso(), project["id"]),
        )
        row = tx.fetch_one("SELECT * FROM projects WHERE id = ?", (project["id"],))
        assert row is not None
        return row

    return await db.transaction(work)


async def delete_project(db: Database, project: Row) -> None:
    if project["is_default"]:
        raise conflict("DEFAULT_PROJECT", "the default project cannot be deleted")
    await db.execute("DELETE FROM projects WHERE id = ?", (project["id"],))
