"""The audit log: one row for every authenticated mutation, with its outcome."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from corral.ids import new_ulid
from corral.storage import Database, utc_now_iso

from . import store
from .store import AuditRecord


@dataclass
class AuditEntry:
    tenant_id: str
    actor_type: str
    action: str
    method: str
    path: str
    status_code: int
    outcome: str
    request_id: str
    api_key_id: str | None = None
    actor_user_id: str | None = None
    workspace_id: str | None = None
    project_id: str | None = None
    external_workspace_id: str | None = None
    external_user_id: str | None = None
    external_project_id: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None


async def record(db: Database, entry: AuditEntry) -> str:
    """Write the entry's event; its id."""
    event = AuditRecord(id=new_ulid(), **vars(entry), created_at=utc_now_iso())  # flat: no deep copy
    await store.audit.insert(db, event)
    return event.id


async def list_entries(
    db: Database,
    tenant_id: str,
    *,
    api_key_id: str | None = None,
    workspace_id: str | None = None,
    before: str | None = None,
    limit: int = 100,
) -> list[AuditRecord]:
    """Newest first; `before` is the id cursor of the previous page's last event."""
    return await store.audit.page(
        db, tenant_id, api_key_id=api_key_id, workspace_id=workspace_id, before=before, limit=limit
    )


def audit_public(event: AuditRecord) -> dict[str, Any]:
    record = asdict(event)
    record["actor"] = {"type": record.pop("actor_type"), "user_id": record.pop("actor_user_id")}
    record["timestamp"] = record.pop("created_at")
    return record
