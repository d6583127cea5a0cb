"""The `tenant_branding` table: a tenant's display name, logo, colour and support address.

The custom domain, which branding also shows, stays in `tenants.custom_domain`.
Only `tenancy.branding` writes these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class BrandingRecord:
    tenant_id: str
    display_name: str | None
    logo_url: str | None
    primary_color: str | None
    support_email: str | None
    updated_at: str


BRANDING = RowStore("tenant_branding", BrandingRecord, id_column="tenant_id")


async def load(db: Database, tenant_id: str) -> BrandingRecord | None:
    return await BRANDING.load(db, tenant_id)


def load_in(tx: Transaction, tenant_id: str) -> BrandingRecord | None:
    row = tx.fetch_one("SELECT * FROM tenant_branding WHERE tenant_id = ?", (tenant_id,))
    return None if row is None else BRANDING.record(row)


# -- writes (tenancy.branding's) --------------------------------------------------------


def save(tx: Transaction, record: BrandingRecord) -> None:
    """Insert or replace the tenant's branding row."""
    BRANDING.delete(tx, record.tenant_id)
    BRANDING.insert(tx, record)
