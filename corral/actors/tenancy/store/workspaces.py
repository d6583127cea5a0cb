"""The `workspaces` table: every query about workspace rows, returning `WorkspaceRecord`s.

Reads are for anyone; the writes (`create`, `rename`, `delete`, `lock`) are the
tenancy package's own (`tenancy.workspaces`, `tenancy.attribution`, `tenancy.members`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.ids import new_uuid
from corral.storage import Database, Transaction, utc_now_iso


@dataclass(frozen=True, slots=True)
class WorkspaceRecord:
    """One workspace; `is_default` is 0 or 1, as stored."""

    id: str
    tenant_id: str
    name: str
    slug: str
    is_default: int
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class _MemberRole:
    member_role: str


WORKSPACES = RowStore("workspaces", WorkspaceRecord)
_MEMBER_ROLES = RowStore("workspace_members", _MemberRole)
"""Decodes the member's role in the rows of `list_for_member` (a join with `workspace_members`)."""


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, workspace_id: str) -> WorkspaceRecord | None:
    return await WORKSPACES.load(db, workspace_id)


async def find(db: Database, tenant_id: str, workspace_id: str) -> WorkspaceRecord | None:
    """The tenant's workspace."""
    row = await db.fetch_one("SELECT * FROM workspaces WHERE id = ? AND tenant_id = ?", (workspace_id, tenant_id))
    return None if row is None else WORKSPACES.record(row)


def find_in(tx: Transaction, tenant_id: str, workspace_id: str) -> WorkspaceRecord | None:
    """As `find`, within a transaction."""
    row = tx.fetch_one("SELECT * FROM workspaces WHERE id = ? AND tenant_id = ?", (workspace_id, tenant_id))
    return None if row is None else WORKSPACES.record(row)


async def exists(db: Database, tenant_id: str, workspace_id: str) -> bool:
    return await db.fetch_one("SELECT 1 FROM workspaces WHERE id = ? AND tenant_id = ?", (workspace_id, tenant_id)) is not None


def by_slug(tx: Transaction, tenant_id: str, slug: str) -> WorkspaceRecord | None:
    row = tx.fetch_one("SELECT * FROM workspaces WHERE tenant_id = ? AND slug = ?", (tenant_id, slug))
    return None if row is None else WORKSPACES.record(row)


def by_name(tx: Transaction, tenant_id: str, name: str) -> WorkspaceRecord | None:
    """The oldest workspace named `name` (any case), so a name keeps finding a workspace
    whose slug was changed."""
    row = tx.fetch_one(
        "SELECT * FROM workspaces WHERE tenant_id = ? AND lower(name) = lower(?) ORDER BY created_at, id LIMIT 1",
        (tenant_id, name),
    )
    return None if row is None else WORKSPACES.record(row)


def slug_used(tx: Transaction, tenant_id: str, slug: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM workspaces WHERE tenant_id = ? AND slug = ?", (tenant_id, slug)) is not None


def default(tx: Transaction, tenant_id: str) -> WorkspaceRecord | None:
    """The tenant's default workspace."""
    row = tx.fetch_one("SELECT * FROM workspaces WHERE tenant_id = ? AND is_default = 1", (tenant_id,))
    return None if row is None else WORKSPACES.record(row)


async def default_id(db: Database, tenant_id: str) -> str | None:
    value = await db.fetch_value("SELECT id FROM workspaces WHERE tenant_id = ? AND is_default = 1", (tenant_id,))
    return None if value is None else str(value)


async def list_for_tenant(db: Database, tenant_id: str) -> list[WorkspaceRecord]:
    """Every workspace of the tenant, oldest first."""
    rows = await db.fetch_all("SELECT * FROM workspaces WHERE tenant_id = ? ORDER BY created_at, id", (tenant_id,))
    return WORKSPACES.records(rows)


async def list_for_member(db: Database, tenant_id: str, user_id: str | None) -> list[tuple[WorkspaceRecord, str]]:
    """The tenant's workspaces the user is a member of, with their role in each, oldest first."""
    rows = await db.fetch_all(
        "SELECT w.*, m.role AS member_role FROM workspaces w JOIN workspace_members m ON m.workspace_id = w.id"
        " WHERE w.tenant_id = ? AND m.user_id = ? ORDER BY w.created_at, w.id",
        (tenant_id, user_id),
    )
    return [(WORKSPACES.record(row), _MEMBER_ROLES.record(row).member_role) for row in rows]


# -- writes (the tenancy package's) -----------------------------------------------------


def create(tx: Transaction, tenant_id: str, name: str, slug: str, *, is_default: bool = False) -> WorkspaceRecord:
    now = utc_now_iso()
    record = WorkspaceRecord(
        id=new_uuid(), tenant_id=tenant_id, name=name, slug=slug, is_default=int(is_default), created_at=now, updated_at=now
    )
    WORKSPACES.insert(tx, record)
    return record


def rename(tx: Transaction, workspace_id: str, name: str, slug: str) -> WorkspaceRecord:
    """Write the name and slug; the workspace as it is now."""
    tx.execute("UPDATE workspaces SET name = ?, slug = ?, updated_at = ? WHERE id = ?", (name, slug, utc_now_iso(), workspace_id))
    row = tx.fetch_one("SELECT * FROM workspaces WHERE id = ?", (workspace_id,))
    assert row is not None
    return WORKSPACES.record(row)


def lock(tx: Transaction, workspace_id: str) -> None:
    """Serialise changes of one workspace's members (a row lock on PostgreSQL; SQLite
    transactions are serial already)."""
    tx.execute("UPDATE workspaces SET updated_at = updated_at WHERE id = ?", (workspace_id,))


async def delete(db: Database, workspace_id: str) -> None:
    """The workspace; its projects and memberships go with it (foreign keys)."""
    await db.execute("DELETE FROM workspaces WHERE id = ?", (workspace_id,))
