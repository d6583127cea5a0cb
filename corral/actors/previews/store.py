"""The previews' tables: every query about exposed ports, share links and preview
domains, returning frozen records.

Previews have no actor; each table has one owner module in this package, the only
caller of its writes: `exposure` writes `sandbox_previews`, `sharing` writes
`sandbox_shares`, `domains` writes `preview_domains`. Reads are for anyone in the
package (the router's resolver in `access` reads all three).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.ids import prefixed
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class PreviewRecord:
    """One exposed port of a sandbox (`sandbox_previews`)."""

    id: str
    tenant_id: str
    sandbox_id: str
    port: int
    ready_at: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One share link (`sandbox_shares`); the token itself is never stored, only its digest."""

    id: str
    tenant_id: str
    sandbox_id: str
    token_digest: str
    token_prefix: str
    port: int | None
    expires_at: str | None
    created_by: str | None
    created_at: str
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class DomainRecord:
    """The preview domain of one scope (`preview_domains`, keyed by scope type and id)."""

    scope_type: str
    scope_id: str
    tenant_id: str
    domain: str
    status: str
    dns_status: str
    dns_error: str | None
    verified_at: str | None
    last_checked_at: str | None
    created_at: str
    updated_at: str


PREVIEWS = RowStore("sandbox_previews", PreviewRecord)
SHARES = RowStore("sandbox_shares", ShareRecord)
DOMAINS = RowStore("preview_domains", DomainRecord, id_column="scope_id")
"""Keyed by (scope_type, scope_id): its queries below name both columns."""

_SCOPE = "scope_type = ? AND scope_id = ?"


# -- sandbox_previews (written by `exposure`) -------------------------------------------


async def exposed_ports(db: Database, sandbox_id: str) -> frozenset[int]:
    return frozenset(record.port for record in await PREVIEWS.where(db, [("sandbox_id", sandbox_id)]))


async def latest_port(db: Database, sandbox_id: str) -> int | None:
    """The port exposed (or exposed again) last."""
    value = await db.fetch_value(
        "SELECT port FROM sandbox_previews WHERE sandbox_id = ? ORDER BY updated_at DESC, id DESC LIMIT 1", (sandbox_id,)
    )
    return None if value is None else int(value)


def expose_port(tx: Transaction, tenant_id: str, sandbox_id: str, port: int, now: str) -> str:
    """The preview id of `port`: the same one when it is exposed again (only its
    `updated_at` moves), else a new row's."""
    found = tx.fetch_value("SELECT id FROM sandbox_previews WHERE sandbox_id = ? AND port = ?", (sandbox_id, port))
    if found is not None:
        tx.execute("UPDATE sandbox_previews SET updated_at = ? WHERE id = ?", (now, found))
        return str(found)
    record = PreviewRecord(
        id=prefixed("prv"), tenant_id=tenant_id, sandbox_id=sandbox_id, port=port, ready_at=None, created_at=now, updated_at=now
    )
    PREVIEWS.insert(tx, record)
    return record.id


async def mark_ready(db: Database, preview_id: str, now: str) -> None:
    await PREVIEWS.update(db, preview_id, {"ready_at": now})


# -- sandbox_shares (written by `sharing`) ----------------------------------------------


async def share_by_digest(db: Database, token_digest: str) -> ShareRecord | None:
    row = await db.fetch_one("SELECT * FROM sandbox_shares WHERE token_digest = ?", (token_digest,))
    return None if row is None else SHARES.record(row)


async def live_shares(db: Database, sandbox_id: str) -> list[ShareRecord]:
    """The sandbox's shares not revoked, newest first."""
    return await SHARES.where(db, [("sandbox_id", sandbox_id)], also="revoked_at IS NULL", order_by="created_at DESC, id DESC")


async def insert_share(db: Database, record: ShareRecord) -> None:
    await db.transaction(lambda tx: SHARES.insert(tx, record))


async def revoke_share(db: Database, sandbox_id: str, share_id: str, now: str) -> bool:
    """Mark the share revoked; False when the sandbox has no such share still live."""
    changed = await db.execute(
        "UPDATE sandbox_shares SET revoked_at = ? WHERE id = ? AND sandbox_id = ? AND revoked_at IS NULL", (now, share_id, sandbox_id)
    )
    return bool(changed)


# -- preview_domains (written by `domains`) ---------------------------------------------


async def find_domain(db: Database, scope_type: str, scope_id: str) -> DomainRecord | None:
    row = await db.fetch_one(f"SELECT * FROM preview_domains WHERE {_SCOPE}", (scope_type, scope_id))
    return None if row is None else DOMAINS.record(row)


async def find_checked_domain(db: Database, scope_type: str, scope_id: str, domain: str) -> DomainRecord | None:
    """The scope's row while it still names `domain` (a check's result is stored only then)."""
    row = await db.fetch_one(f"SELECT * FROM preview_domains WHERE {_SCOPE} AND domain = ?", (scope_type, scope_id, domain))
    return None if row is None else DOMAINS.record(row)


async def domain_with_status(db: Database, scope_type: str, scope_id: str, status: str) -> str | None:
    value = await db.fetch_value(
        f"SELECT domain FROM preview_domains WHERE {_SCOPE} AND status = ?", (scope_type, scope_id, status)
    )
    return None if value is None else str(value)


async def taken_by_another_tenant(db: Database, domain: str, tenant_id: str) -> bool:
    return await db.fetch_one("SELECT 1 FROM preview_domains WHERE domain = ? AND tenant_id != ?", (domain, tenant_id)) is not None


async def replace_domain(db: Database, record: DomainRecord) -> None:
    """The scope's domain is now `record` (whatever it had before is dropped)."""

    def work(tx: Transaction) -> None:
        tx.execute(f"DELETE FROM preview_domains WHERE {_SCOPE}", (record.scope_type, record.scope_id))
        DOMAINS.insert(tx, record)

    await db.transaction(work)


async def delete_domain(db: Database, scope_type: str, scope_id: str) -> None:
    await db.execute(f"DELETE FROM preview_domains WHERE {_SCOPE}", (scope_type, scope_id))


async def delete_orphaned_domains(db: Database) -> None:
    """Domains of workspaces and projects that no longer exist."""
    await db.execute("DELETE FROM preview_domains WHERE scope_type = 'workspace' AND scope_id NOT IN (SELECT id FROM workspaces)")
    await db.execute("DELETE FROM preview_domains WHERE scope_type = 'project' AND scope_id NOT IN (SELECT id FROM projects)")


async def record_verified(db: Database, scope_type: str, scope_id: str, domain: str, status: str, now: str) -> None:
    """DNS leads to the router: `status` (configured), verified since the first success."""
    await db.execute(
        "UPDATE preview_domains SET status = ?, dns_status = 'verified', dns_error = NULL,"
        " verified_at = COALESCE(verified_at, ?), last_checked_at = ?, updated_at = ?"
        f" WHERE {_SCOPE} AND domain = ?",
        (status, now, now, now, scope_type, scope_id, domain),
    )


async def record_refused(db: Database, scope_type: str, scope_id: str, domain: str, status: str, why: str | None, now: str) -> None:
    """DNS says no: back to `status` (pending), no longer verified."""
    await db.execute(
        "UPDATE preview_domains SET status = ?, dns_status = 'pending', dns_error = ?, verified_at = NULL,"
        f" last_checked_at = ?, updated_at = ? WHERE {_SCOPE} AND domain = ?",
        (status, why, now, now, scope_type, scope_id, domain),
    )


async def record_unanswered(db: Database, scope_type: str, scope_id: str, domain: str, why: str | None, now: str) -> None:
    """DNS could not be asked: only the error and the time of the check change."""
    await db.execute(
        f"UPDATE preview_domains SET dns_error = ?, last_checked_at = ? WHERE {_SCOPE} AND domain = ?",
        (why, now, scope_type, scope_id, domain),
    )


async def due_for_check(db: Database, pending: str, checked_before: str) -> list[DomainRecord]:
    """Domains in status `pending`, or not checked since `checked_before`, longest unchanged first."""
    rows = await db.fetch_all(
        "SELECT * FROM preview_domains WHERE status = ? OR last_checked_at IS NULL OR last_checked_at < ? ORDER BY updated_at",
        (pending, checked_before),
    )
    return DOMAINS.records(rows)


async def scope_domains(
    db: Database, tenant_id: str, workspace_id: str | None, project_id: str | None, statuses: tuple[str, ...]
) -> dict[str, str]:
    """Scope type -> domain, of the tenant, workspace and project whose domain is in one of `statuses`."""
    marks = ", ".join("?" for _ in statuses)
    rows = await db.fetch_all(
        "SELECT * FROM preview_domains WHERE tenant_id = ? AND status IN (" + marks + ") AND ("
        "(scope_type = 'tenant' AND scope_id = ?) OR (scope_type = 'workspace' AND scope_id = ?)"
        " OR (scope_type = 'project' AND scope_id = ?))",
        (tenant_id, *statuses, tenant_id, workspace_id or "", project_id or ""),
    )
    return {record.scope_type: record.domain for record in DOMAINS.records(rows)}
