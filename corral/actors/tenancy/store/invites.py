"""The `invites` table: every query about invite rows, returning `InviteRecord`s.

Reads are for anyone; the writes (`supersede`, `create`, `revoke`, `claim`) are the
tenancy package's own (`tenancy.invites`). Tokens are looked up by their digest.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction, utc_now_iso

WORKSPACE = "workspace"
TENANT = "tenant"


@dataclass(frozen=True, slots=True)
class InviteRecord:
    """One invite to a workspace (`kind` workspace) or to a tenant (`kind` tenant)."""

    id: str
    kind: str
    tenant_id: str
    workspace_id: str | None
    email: str
    email_lower: str
    role: str
    token_digest: str
    invited_by: str | None
    expires_at: str
    accepted_at: str | None
    accepted_by: str | None
    revoked_at: str | None
    inserted_at: str


@dataclass(frozen=True, slots=True)
class NamedInvite(InviteRecord):
    """An invite with the names the invitee is shown (the workspace's is None for a
    tenant invite)."""

    tenant_name: str
    workspace_name: str | None


INVITES = RowStore("invites", InviteRecord)
_NAMED = RowStore("invites", NamedInvite)
"""Decodes the rows of `_BY_TOKEN` (a join with `tenants` and `workspaces`)."""

_BY_TOKEN = (
    "SELECT i.*, t.name AS tenant_name, w.name AS workspace_name FROM invites i"
    " JOIN tenants t ON t.id = i.tenant_id LEFT JOIN workspaces w ON w.id = i.workspace_id"
    " WHERE i.token_digest = ? AND i.kind = ?"
)


def _place(kind: str) -> str:
    """The column naming where an invite of `kind` leads."""
    return "workspace_id" if kind == WORKSPACE else "tenant_id"


# -- reads ------------------------------------------------------------------------------


async def by_token(db: Database, kind: str, token_digest: str) -> NamedInvite | None:
    row = await db.fetch_one(_BY_TOKEN, (token_digest, kind))
    return None if row is None else _NAMED.record(row)


def by_token_in(tx: Transaction, kind: str, token_digest: str) -> NamedInvite | None:
    """As `by_token`, within a transaction."""
    row = tx.fetch_one(_BY_TOKEN, (token_digest, kind))
    return None if row is None else _NAMED.record(row)


async def pending(db: Database, kind: str, tenant_id: str, place_id: str | None) -> list[InviteRecord]:
    """Invites of `kind` to the workspace or tenant `place_id` neither accepted, revoked
    nor expired, oldest first."""
    rows = await db.fetch_all(
        f"SELECT * FROM invites WHERE kind = ? AND tenant_id = ? AND {_place(kind)} = ?"
        " AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ? ORDER BY inserted_at, id",
        (kind, tenant_id, place_id, utc_now_iso()),
    )
    return INVITES.records(rows)


def find(tx: Transaction, kind: str, tenant_id: str, invite_id: str) -> InviteRecord | None:
    """The tenant's invite of `kind`."""
    row = tx.fetch_one("SELECT * FROM invites WHERE id = ? AND kind = ? AND tenant_id = ?", (invite_id, kind, tenant_id))
    return None if row is None else INVITES.record(row)


def load(tx: Transaction, invite_id: str) -> InviteRecord | None:
    row = tx.fetch_one("SELECT * FROM invites WHERE id = ?", (invite_id,))
    return None if row is None else INVITES.record(row)


# -- writes (the tenancy package's) -----------------------------------------------------


def supersede(tx: Transaction, kind: str, place_id: str | None, email: str, now: str) -> None:
    """Revoke the address's pending invites of `kind` to the workspace or tenant `place_id`."""
    tx.execute(
        f"UPDATE invites SET revoked_at = ? WHERE kind = ? AND {_place(kind)} = ? AND email_lower = ?"
        " AND accepted_at IS NULL AND revoked_at IS NULL",
        (now, kind, place_id, email.lower()),
    )


def create(tx: Transaction, record: InviteRecord) -> None:
    INVITES.insert(tx, record)


def revoke(tx: Transaction, invite_id: str, now: str) -> None:
    """Revoke the invite unless it was accepted meanwhile."""
    tx.execute("UPDATE invites SET revoked_at = ? WHERE id = ? AND accepted_at IS NULL", (now, invite_id))


def claim(tx: Transaction, invite_id: str, user_id: str, now: str) -> bool:
    """Mark the invite accepted by the user; False when it was accepted or revoked since
    it was read (by a concurrent request)."""
    claimed = tx.execute(
        "UPDATE invites SET accepted_at = ?, accepted_by = ? WHERE id = ? AND accepted_at IS NULL AND revoked_at IS NULL",
        (now, user_id, invite_id),
    )
    return claimed == 1
