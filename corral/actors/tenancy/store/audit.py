"""The `audit_events` table: one row per authenticated mutation, written once, never changed.

`insert` is the tenancy package's own (`tenancy.audit`); reads are for anyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database
from corral.storage.database import insert_sql


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit event (fields in the table's column order, which the API keeps)."""

    id: str
    tenant_id: str
    api_key_id: str | None
    actor_user_id: str | None
    actor_type: str
    workspace_id: str | None
    project_id: str | None
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    action: str
    resource_type: str | None
    resource_id: str | None
    method: str
    path: str
    status_code: int
    outcome: str
    request_id: str
    created_at: str


AUDIT_EVENTS = RowStore("audit_events", AuditRecord)


async def insert(db: Database, record: AuditRecord) -> None:
    """Queued (`Database.later`): the request it records does not wait for the commit."""
    row = {name: getattr(record, name) for name in AuditRecord.__slots__}  # flat: no deep copy
    await db.later.add(insert_sql(AUDIT_EVENTS.table, row), tuple(row.values()))


async def page(
    db: Database,
    tenant_id: str,
    *,
    api_key_id: str | None = None,
    workspace_id: str | None = None,
    before: str | None = None,
    limit: int = 100,
) -> list[AuditRecord]:
    """The tenant's events (only one key's, or one workspace's, when given), newest first;
    `before` is the id cursor of the previous page's last event."""
    clauses, params = ["tenant_id = ?"], [tenant_id]
    for column, value in (("api_key_id", api_key_id), ("workspace_id", workspace_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if before:
        clauses.append("id < ?")
        params.append(before)
    await db.later.flush()
    rows = await db.fetch_all(
        f"SELECT * FROM audit_events WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT ?", (*params, limit)
    )
    return AUDIT_EVENTS.records(rows)
