"""The `projects` table: every query about project rows, returning `ProjectRecord`s.

Reads are for anyone; the writes (`create`, `rename`, `delete`) are the tenancy
package's own (`tenancy.workspaces`, `tenancy.attribution`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.ids import new_uuid
from corral.storage import Database, Transaction, utc_now_iso

from .workspaces import WorkspaceRecord


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    """One project of a workspace; `is_default` is 0 or 1, as stored."""

    id: str
    tenant_id: str
    workspace_id: str
    name: str
    slug: str
    is_default: int
    created_at: str
    updated_at: str


PROJECTS = RowStore("projects", ProjectRecord)


# -- reads ------------------------------------------------------------------------------


async def find(db: Database, tenant_id: str, project_id: str) -> ProjectRecord | None:
    """The tenant's project."""
    row = await db.fetch_one("SELECT * FROM projects WHERE id = ? AND tenant_id = ?", (project_id, tenant_id))
    return None if row is None else PROJECTS.record(row)


def find_in(tx: Transaction, workspace_id: str, project_id: str) -> ProjectRecord | None:
    """The workspace's project, within a transaction."""
    row = tx.fetch_one("SELECT * FROM projects WHERE id = ? AND workspace_id = ?", (project_id, workspace_id))
    return None if row is None else PROJECTS.record(row)


def by_slug(tx: Transaction, workspace_id: str, slug: str) -> ProjectRecord | None:
    row = tx.fetch_one("SELECT * FROM projects WHERE workspace_id = ? AND slug = ?", (workspace_id, slug))
    return None if row is None else PROJECTS.record(row)


def by_name(tx: Transaction, workspace_id: str, name: str) -> ProjectRecord | None:
    """The oldest project named `name` (any case), so a name keeps finding a project
    whose slug was changed."""
    row = tx.fetch_one(
        "SELECT * FROM projects WHERE workspace_id = ? AND lower(name) = lower(?) ORDER BY created_at, id LIMIT 1",
        (workspace_id, name),
    )
    return None if row is None else PROJECTS.record(row)


def slug_used(tx: Transaction, workspace_id: str, slug: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM projects WHERE workspace_id = ? AND slug = ?", (workspace_id, slug)) is not None


def default(tx: Transaction, workspace_id: str) -> ProjectRecord | None:
    """The workspace's default project."""
    row = tx.fetch_one("SELECT * FROM projects WHERE workspace_id = ? AND is_default = 1", (workspace_id,))
    return None if row is None else PROJECTS.record(row)


async def list_in(db: Database, tenant_id: str, workspace_ids: list[str]) -> list[ProjectRecord]:
    """The projects of these workspaces of the tenant, oldest first."""
    if not workspace_ids:
        return []
    marks = ", ".join("?" for _ in workspace_ids)
    rows = await db.fetch_all(
        f"SELECT * FROM projects WHERE tenant_id = ? AND workspace_id IN ({marks}) ORDER BY created_at, id",
        (tenant_id, *workspace_ids),
    )
    return PROJECTS.records(rows)


# -- writes (the tenancy package's) -----------------------------------------------------


def create(tx: Transaction, workspace: WorkspaceRecord, name: str, slug: str, *, is_default: bool = False) -> ProjectRecord:
    now = utc_now_iso()
    record = ProjectRecord(
        id=new_uuid(),
        tenant_id=workspace.tenant_id,
        workspace_id=workspace.id,
        name=name,
        slug=slug,
        is_default=int(is_default),
        created_at=now,
        updated_at=now,
    )
    PROJECTS.insert(tx, record)
    return record


def rename(tx: Transaction, project_id: str, name: str, slug: str) -> ProjectRecord:
    """Write the name and slug; the project as it is now."""
    tx.execute("UPDATE projects SET name = ?, slug = ?, updated_at = ? WHERE id = ?", (name, slug, utc_now_iso(), project_id))
    row = tx.fetch_one("SELECT * FROM projects WHERE id = ?", (project_id,))
    assert row is not None
    return PROJECTS.record(row)


async def delete(db: Database, project_id: str) -> None:
    await db.execute("DELETE FROM projects WHERE id = ?", (project_id,))
