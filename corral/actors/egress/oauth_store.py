"""The queries of OAuth connect, over the tables of migration 0013.

Providers a tenant registered (`ProviderRecord`, the client secret still sealed) and
the flows started against them (`FlowRecord`, the refresh token still sealed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.actors.record import RowStore
from corral.storage import Database, Transaction, utc_now_iso


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    id: str
    tenant_id: str
    provider: str
    name: str
    client_id: str
    client_secret: bytes = field(repr=False)
    authorize_url: str
    token_url: str
    scopes: list[str] = field(hash=False)
    allowed_hosts: list[str] = field(hash=False)
    created_at: str


@dataclass(frozen=True, slots=True)
class FlowRecord:
    id: str
    tenant_id: str
    state: str
    provider: str
    user_id: str | None
    is_admin: int
    scope: str
    owner_user_id: str | None
    expose_as_env: str | None
    redirect_uri: str
    code_verifier: str = field(repr=False)
    status: str
    secret_id: str | None
    error: str | None
    refresh_token: bytes | None = field(repr=False)
    created_at: str
    updated_at: str


PROVIDERS = RowStore(
    "egress_oauth_providers", ProviderRecord, json_columns=("scopes", "allowed_hosts")
)
FLOWS = RowStore("egress_oauth_flows", FlowRecord)




async def add_provider(db: Database, record: ProviderRecord) -> bool:
    """Insert a tenant's provider; False when the tenant already has one of that `provider`."""

    def work(tx: Transaction) -> bool:
        taken = tx.fetch_value(
            "SELECT COUNT(*) FROM egress_oauth_providers WHERE tenant_id = ? AND provider = ?",
            (record.tenant_id, record.provider),
        )
        if taken:
            return False
        PROVIDERS.insert(tx, record)
        return True

    return await db.transaction(work)


async def prune_flows(db: Database, tenant_id: str, started_before: str) -> None:
    """Forget the tenant's flows that did not complete and started before `started_before`."""
    await db.execute(
        "DELETE FROM egress_oauth_flows WHERE tenant_id = ? AND status <> 'complete' AND created_at < ?",
        (tenant_id, started_before),
    )


async def mark_exchanging(db: Database, flow_id: str) -> bool:
    """Move a pending flow to `exchanging`; False if it was not pending (a second callback)."""
    changed = await db.execute(
        "UPDATE egress_oauth_flows SET status = 'exchanging', updated_at = ? WHERE id = ? AND status = 'pending'",
        (utc_now_iso(), flow_id),
    )
    return changed == 1


async def refreshable_flows(db: Database, tenant_id: str, expiring_by: str) -> list[FlowRecord]:
    """Completed flows with a refresh token whose secret expires by `expiring_by`."""
    rows = await db.fetch_all(
        "SELECT * FROM egress_oauth_flows WHERE tenant_id = ? AND status = 'complete' AND refresh_token IS NOT NULL"
        " AND secret_id IN (SELECT id FROM egress_secrets WHERE tenant_id = ? AND expires_at IS NOT NULL"
        " AND expires_at <= ?)",
        (tenant_id, tenant_id, expiring_by),
    )
    return FLOWS.records(rows)
