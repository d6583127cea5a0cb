"""The `tenant_members` table: who belongs to which tenant, with which role.

Reads are for anyone; the writes (`add`, `join`) are the tenancy package's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction, utc_now_iso


@dataclass(frozen=True, slots=True)
class TenantMemberRecord:
    """One membership of a user in a tenant."""

    tenant_id: str
    user_id: str
    role: str
    joined_at: str


@dataclass(frozen=True, slots=True)
class TenantMember(TenantMemberRecord):
    """A membership with the member's e-mail address (what a session's principal needs)."""

    email: str


_WITH_EMAIL = RowStore("tenant_members", TenantMember)
"""Decodes the rows of `_WITH_EMAIL_SQL` (a join with `users`)."""

_WITH_EMAIL_SQL = "SELECT m.*, u.email FROM tenant_members m JOIN users u ON u.id = m.user_id"


# -- reads ------------------------------------------------------------------------------


async def role(db: Database, tenant_id: str, user_id: str) -> str | None:
    """The user's role in the tenant; None when they are not a member."""
    value = await db.fetch_value(
        "SELECT role FROM tenant_members WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id)
    )
    return None if value is None else str(value)


async def with_email(db: Database, tenant_id: str, user_id: str) -> TenantMember | None:
    row = await db.fetch_one(_WITH_EMAIL_SQL + " WHERE m.tenant_id = ? AND m.user_id = ?", (tenant_id, user_id))
    return None if row is None else _WITH_EMAIL.record(row)


async def first_tenant(db: Database, user_id: str) -> str | None:
    """The tenant the user joined first (a login without a tenant goes there)."""
    value = await db.fetch_value(
        "SELECT tenant_id FROM tenant_members WHERE user_id = ? ORDER BY joined_at, tenant_id LIMIT 1", (user_id,)
    )
    return None if value is None else str(value)


def is_member(tx: Transaction, tenant_id: str, user_id: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM tenant_members WHERE tenant_id = ? AND user_id = ?", (tenant_id, user_id)) is not None


# -- writes (the tenancy package's) -----------------------------------------------------


def add(tx: Transaction, tenant_id: str, user_id: str, role: str) -> None:
    """Insert the membership (an existing one is an integrity error)."""
    tx.execute(
        "INSERT INTO tenant_members (tenant_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)",
        (tenant_id, user_id, role, utc_now_iso()),
    )


def join(tx: Transaction, tenant_id: str, user_id: str, role: str) -> bool:
    """Insert the membership unless it exists (also when a concurrent request just made it);
    whether this call made it."""
    inserted = tx.execute(
        "INSERT INTO tenant_members (tenant_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (tenant_id, user_id) DO NOTHING",
        (tenant_id, user_id, role, utc_now_iso()),
    )
    return inserted == 1
