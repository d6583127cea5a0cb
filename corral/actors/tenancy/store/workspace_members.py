"""The `workspace_members` table: who belongs to which workspace, with which role.

Members are read with the user's public fields (`WorkspaceMember`). Reads are for
anyone; the writes (`add`, `join`, `set_role`, `remove`) are the tenancy package's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction, utc_now_iso


@dataclass(frozen=True, slots=True)
class WorkspaceMember:
    """One membership of a user in a workspace, with the user's e-mail, name and avatar."""

    workspace_id: str
    user_id: str
    role: str
    joined_at: str
    added_by: str | None
    email: str
    name: str | None
    avatar_url: str | None


_MEMBERS = RowStore("workspace_members", WorkspaceMember)
"""Decodes the rows of `_MEMBER_SQL` (a join with `users`)."""

_MEMBER_SQL = (
    "SELECT m.workspace_id, m.user_id, m.role, m.joined_at, m.added_by, u.email, u.name, u.avatar_url"
    " FROM workspace_members m JOIN users u ON u.id = m.user_id"
)


# -- reads ------------------------------------------------------------------------------


async def list_for(db: Database, workspace_id: str) -> list[WorkspaceMember]:
    """The workspace's members, in the order they joined."""
    rows = await db.fetch_all(_MEMBER_SQL + " WHERE m.workspace_id = ? ORDER BY m.joined_at, m.user_id", (workspace_id,))
    return _MEMBERS.records(rows)


def find(tx: Transaction, workspace_id: str, user_id: str) -> WorkspaceMember | None:
    row = tx.fetch_one(_MEMBER_SQL + " WHERE m.workspace_id = ? AND m.user_id = ?", (workspace_id, user_id))
    return None if row is None else _MEMBERS.record(row)


async def role(db: Database, workspace_id: str, user_id: str) -> str | None:
    """The user's own role in the workspace; None when they are not a member."""
    value = await db.fetch_value(
        "SELECT role FROM workspace_members WHERE workspace_id = ? AND user_id = ?", (workspace_id, user_id)
    )
    return None if value is None else str(value)


def owner_count(tx: Transaction, workspace_id: str) -> int:
    owners = tx.fetch_value(
        "SELECT COUNT(*) FROM workspace_members WHERE workspace_id = ? AND role = 'owner'", (workspace_id,)
    )
    return int(owners)


# -- writes (the tenancy package's) -----------------------------------------------------


def add(tx: Transaction, workspace_id: str, user_id: str, role: str, added_by: str | None) -> None:
    """Insert the membership (an existing one is an integrity error)."""
    tx.execute(
        "INSERT INTO workspace_members (workspace_id, user_id, role, joined_at, added_by) VALUES (?, ?, ?, ?, ?)",
        (workspace_id, user_id, role, utc_now_iso(), added_by),
    )


def join(tx: Transaction, workspace_id: str, user_id: str, role: str, added_by: str | None) -> bool:
    """Insert the membership unless it exists (also when a concurrent request just made it);
    whether this call made it."""
    inserted = tx.execute(
        "INSERT INTO workspace_members (workspace_id, user_id, role, joined_at, added_by) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (workspace_id, user_id) DO NOTHING",
        (workspace_id, user_id, role, utc_now_iso(), added_by),
    )
    return inserted == 1


def set_role(tx: Transaction, workspace_id: str, user_id: str, role: str) -> None:
    tx.execute("UPDATE workspace_members SET role = ? WHERE workspace_id = ? AND user_id = ?", (role, workspace_id, user_id))


def remove(tx: Transaction, workspace_id: str, user_id: str) -> None:
    tx.execute("DELETE FROM workspace_members WHERE workspace_id = ? AND user_id = ?", (workspace_id, user_id))
