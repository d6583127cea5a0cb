"""The `users` table: every query about user rows, returning `UserRecord`s.

Reads are for anyone; `create` is the tenancy package's own (`tenancy.tenants`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.ids import new_uuid
from corral.storage import Database, Transaction, utc_now_iso


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user; `email_lower` is the unique key an e-mail address is looked up by."""

    id: str
    email: str
    email_lower: str
    name: str | None
    avatar_url: str | None
    password_hash: str | None
    created_at: str
    updated_at: str


USERS = RowStore("users", UserRecord)


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, user_id: str) -> UserRecord | None:
    return await USERS.load(db, user_id)


async def by_email(db: Database, email: str) -> UserRecord | None:
    """The user with this e-mail address, in any case."""
    row = await db.fetch_one("SELECT * FROM users WHERE email_lower = ?", (email.lower(),))
    return None if row is None else USERS.record(row)


def email_used(tx: Transaction, email: str) -> bool:
    return tx.fetch_one("SELECT id FROM users WHERE email_lower = ?", (email.lower(),)) is not None


async def member_of(db: Database, user_id: str, tenant_id: str) -> UserRecord | None:
    """The user, when they are a member of the tenant."""
    row = await db.fetch_one(
        "SELECT u.* FROM users u JOIN tenant_members m ON m.user_id = u.id WHERE u.id = ? AND m.tenant_id = ?",
        (user_id, tenant_id),
    )
    return None if row is None else USERS.record(row)


def member_by_email(tx: Transaction, tenant_id: str, email: str) -> UserRecord | None:
    """The tenant member with this e-mail address, in any case."""
    row = tx.fetch_one(
        "SELECT u.* FROM users u JOIN tenant_members m ON m.user_id = u.id AND m.tenant_id = ? WHERE u.email_lower = ?",
        (tenant_id, email.lower()),
    )
    return None if row is None else USERS.record(row)


# -- writes (the tenancy package's) -----------------------------------------------------


def create(tx: Transaction, email: str, name: str | None, password_hash: str | None) -> UserRecord:
    """Insert the user (the caller checks first that the address is free: `email_used`)."""
    now = utc_now_iso()
    record = UserRecord(
        id=new_uuid(),
        email=email,
        email_lower=email.lower(),
        name=name,
        avatar_url=None,
        password_hash=password_hash,
        created_at=now,
        updated_at=now,
    )
    USERS.insert(tx, record)
    return record
