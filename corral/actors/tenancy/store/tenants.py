"""The `tenants` table: every query about tenant rows, returning `TenantRecord`s.

Reads are for anyone; the writes (`create`, `set_custom_domain`) are the tenancy
package's own (`tenancy.tenants`, `tenancy.white_label`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.ids import new_uuid
from corral.storage import Database, Transaction, utc_now_iso

DEFAULT_SANDBOX_LIMIT = 10


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """One tenant (an organisation)."""

    id: str
    name: str
    custom_domain: str | None
    sandbox_limit: int
    created_at: str
    updated_at: str


TENANTS = RowStore("tenants", TenantRecord)


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, tenant_id: str) -> TenantRecord | None:
    return await TENANTS.load(db, tenant_id)


async def list_all(db: Database) -> list[TenantRecord]:
    """Every tenant, oldest first."""
    return TENANTS.records(await db.fetch_all("SELECT * FROM tenants ORDER BY created_at, id"))


def lock(tx: Transaction, tenant_id: str) -> None:
    """Hold the tenant's row until the transaction ends, so that a count of its
    resources and the insert it allows are one step for every node and connection (a
    tenant's caps: sandboxes, webhooks, builds). On PostgreSQL two transactions that
    both counted under the cap would otherwise both insert (READ COMMITTED); SQLite
    runs one write transaction at a time anyway."""
    if tx.dialect == "postgresql":
        tx.fetch_one("SELECT id FROM tenants WHERE id = ? FOR UPDATE", (tenant_id,))


def exists(tx: Transaction, tenant_id: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM tenants WHERE id = ?", (tenant_id,)) is not None


def domain_used_by_other(tx: Transaction, domain: str, tenant_id: str) -> bool:
    """Whether a tenant other than `tenant_id` has `domain` as its custom domain."""
    return tx.fetch_one("SELECT 1 FROM tenants WHERE custom_domain = ? AND id <> ?", (domain, tenant_id)) is not None


# -- writes (the tenancy package's) -----------------------------------------------------


def create(tx: Transaction, name: str) -> TenantRecord:
    now = utc_now_iso()
    record = TenantRecord(
        id=new_uuid(), name=name, custom_domain=None, sandbox_limit=DEFAULT_SANDBOX_LIMIT, created_at=now, updated_at=now
    )
    TENANTS.insert(tx, record)
    return record


def set_custom_domain(tx: Transaction, tenant_id: str, domain: str | None) -> TenantRecord:
    """Write the tenant's custom domain (None clears it); the tenant as it is now."""
    tx.execute("UPDATE tenants SET custom_domain = ?, updated_at = ? WHERE id = ?", (domain, utc_now_iso(), tenant_id))
    row = tx.fetch_one("SELECT * FROM tenants WHERE id = ?", (tenant_id,))
    assert row is not None
    return TENANTS.record(row)
