"""The egress audit log: one row per request through the proxy, queried by the API.

`record_request` is what the proxy calls (once per request, CONNECT tunnels that could
not be opened included): it stores the row and publishes it on the bus as an
`egress.audit` event, which the live tail forwards. Rows carry `request_transforms`
(`{type, header, secret_id}`), never a value. Rows older than `RETENTION_DAYS` are
pruned by a periodic job (`prune`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from corral.errors import ApiError, not_found, validation_error
from corral.ids import new_uuid
from corral.storage import Database, Event, parse_iso, to_iso, utc_now, utc_now_iso

from .resources import Resource
from .services import EgressServices
from .store import AUDIT, AuditRecord

RETENTION_DAYS = 90
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
SUGGESTION_WINDOW_DAYS = 7
SUGGESTION_LIMIT = 50
EVENT_TYPE = "egress.audit"
EVENT_RESOURCE_TYPE = "egress"
AUDIT_ACTIONS = ("allow", "reject", "stub", "error")
_RELATIVE = re.compile(r"(\d{1,6})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@dataclass(frozen=True)
class AuditEntry:
    """What the proxy knows of one finished (or refused) request."""

    tenant_id: str
    host: str
    action: str
    """`allow`, `reject`, `stub` or `error`."""
    resource_id: str | None = None
    resource_type: str | None = None
    workspace_id: str | None = None
    owner_user_id: str | None = None
    external_user_id: str | None = None
    external_workspace_id: str | None = None
    method: str | None = None
    path: str | None = None
    sni: str | None = None
    mode: str | None = None
    remote_addr: str | None = None
    rejected_by: str | None = None
    status_code: int | None = None
    duration_ms: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    error_message: str | None = None
    request_transforms: list[dict[str, Any]] = field(default_factory=list)
    response_transforms: list[dict[str, Any]] = field(default_factory=list)
    mcp: dict[str, Any] | None = None

    @classmethod
    def for_resource(cls, resource: Resource, resource_type: str, **fields: Any) -> AuditEntry:
        """An entry with `resource`'s identity chain filled in."""
        return cls(
            tenant_id=resource.tenant_id,
            resource_id=resource.id,
            resource_type=resource_type,
            workspace_id=resource.workspace_id,
            owner_user_id=resource.owner_user_id,
            external_user_id=resource.external_user_id,
            external_workspace_id=resource.external_workspace_id,
            **fields,
        )


def audit_public(row: AuditRecord) -> dict[str, Any]:
    return {
        "id": row.id,
        "tenant_id": row.tenant_id,
        "workspace_id": row.workspace_id,
        "owner_user_id": row.owner_user_id,
        "external_user_id": row.external_user_id,
        "external_workspace_id": row.external_workspace_id,
        "resource_id": row.resource_id,
        "resource_type": row.resource_type,
        "host": row.host,
        "method": row.method,
        "path": row.path,
        "sni": row.sni,
        "mode": row.mode,
        "remote_addr": row.remote_addr,
        "action": row.action,
        "rejected_by": row.rejected_by,
        "status_code": row.status_code,
        "duration_ms": row.duration_ms,
        "bytes_in": row.bytes_in,
        "bytes_out": row.bytes_out,
        "error_message": row.error_message,
        "request_transforms": row.request_transforms,
        "response_transforms": row.response_transforms,
        "mcp": row.mcp,
        "created_at": row.created_at,
    }


async def record_request(services: EgressServices, entry: AuditEntry) -> AuditRecord:
    """Store one audit row and publish it (`egress.audit`) for the live tail."""
    if entry.action not in AUDIT_ACTIONS:
        raise ValueError(f"unknown audit action {entry.action!r}")
    values = dict(entry.__dict__)
    record = AuditRecord(id=new_uuid(), created_at=utc_now_iso(), **values)
    await services.db.transaction(lambda tx: AUDIT.insert(tx, record))
    await services.bus.publish(
        Event(
            type=EVENT_TYPE,
            # Its own resource type: the sandbox's and computer's own event streams skip it.
            resource_type=EVENT_RESOURCE_TYPE,
            resource_id=record.resource_id or record.tenant_id,
            data=audit_public(record),
            tenant_id=record.tenant_id,
        )
    )
    return record


def parse_moment(name: str, text: str) -> str:
    """`30m`, `1h`, `7d` (that long ago) or an ISO timestamp, as a stored timestamp."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        amount, unit = int(relative[1]), relative[2]
        return to_iso(utc_now() - timedelta(**{_UNITS[unit]: amount}))
    try:
        return to_iso(parse_iso(text.strip()))
    except ValueError as exc:
        raise validation_error({name: "must be a duration such as 30m, 1h, 7d or an ISO 8601 timestamp"}) from exc


@dataclass(frozen=True)
class AuditQuery:
    resource_id: str | None = None
    host: str | None = None
    action: str | None = None
    external_user_id: str | None = None
    external_workspace_id: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None


def parse_query(args: dict[str, str]) -> AuditQuery:
    """The query string of `GET /egress/audit`; every problem is one 422."""
    problems: dict[str, str] = {}
    limit = DEFAULT_LIMIT
    raw_limit = args.get("limit")
    if raw_limit not in (None, ""):
        try:
            limit = int(raw_limit)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            problems["limit"] = f"must be an integer from 1 to {MAX_LIMIT}"
    moments: dict[str, str | None] = {}
    for name in ("since", "until"):
        raw = args.get(name)
        moments[name] = None
        if raw:
            try:
                moments[name] = parse_moment(name, raw)
            except ApiError as exc:
                problems[name] = (exc.details or {}).get(name, "is invalid")
    action = args.get("action") or None
    if action is not None and action not in AUDIT_ACTIONS:
        problems["action"] = f"must be one of {', '.join(AUDIT_ACTIONS)}"
    if problems:
        raise validation_error(problems)
    return AuditQuery(
        resource_id=args.get("resource_id") or None,
        host=(args.get("host") or "").lower() or None,
        action=action,
        external_user_id=args.get("external_user_id") or None,
        external_workspace_id=args.get("external_workspace_id") or None,
        since=moments["since"],
        until=moments["until"],
        limit=limit,
        cursor=args.get("cursor") or None,
    )


async def query_audit(db: Database, tenant_id: str, query: AuditQuery) -> tuple[list[AuditRecord], str | None]:
    """Rows newest first, and the cursor of the next page (None on the last)."""
    clauses, params = ["tenant_id = ?"], [tenant_id]
    for name in ("resource_id", "host", "action", "external_user_id", "external_workspace_id"):
        value = getattr(query, name)
        if value is not None:
            clauses.append(f"{name} = ?")
            params.append(value)
    if query.since:
        clauses.append("created_at >= ?")
        params.append(query.since)
    if query.until:
        clauses.append("created_at <= ?")
        params.append(query.until)
    if query.cursor:
        anchor = await db.fetch_one("SELECT created_at, id FROM egress_audit WHERE id = ? AND tenant_id = ?", (query.cursor, tenant_id))
        if anchor is None:
            raise validation_error({"cursor": "is not a cursor of this log"})
        clauses.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params.extend([anchor["created_at"], anchor["created_at"], anchor["id"]])
    rows = await db.fetch_all(
        f"SELECT * FROM egress_audit WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*params, query.limit + 1),
    )
    records = AUDIT.records(rows[: query.limit])
    next_cursor = records[-1].id if len(rows) > query.limit and records else None
    return records, next_cursor


async def get_audit(db: Database, tenant_id: str, audit_id: str) -> AuditRecord:
    found = await AUDIT.where(db, [("id", audit_id), ("tenant_id", tenant_id)])
    if not found:
        raise not_found("audit event not found")
    return found[0]


async def suggestions(db: Database, tenant_id: str, resource_id: str | None) -> list[dict[str, Any]]:
    """Hosts contacted in the last week, most requests first, with the latest action."""
    since = to_iso(utc_now() - timedelta(days=SUGGESTION_WINDOW_DAYS))
    clauses, params = ["tenant_id = ?", "created_at >= ?"], [tenant_id, since]
    if resource_id:
        clauses.append("resource_id = ?")
        params.append(resource_id)
    where = " AND ".join(clauses)
    rows = await db.fetch_all(
        f"SELECT host, COUNT(*) AS count, MAX(created_at) AS last_seen_at FROM egress_audit WHERE {where}"
        " GROUP BY host ORDER BY count DESC, last_seen_at DESC, host LIMIT ?",
        (*params, SUGGESTION_LIMIT),
    )
    found = []
    for row in rows:
        action = await db.fetch_value(
            f"SELECT action FROM egress_audit WHERE {where} AND host = ? ORDER BY created_at DESC, id DESC LIMIT 1",
            (*params, row["host"]),
        )
        found.append({"host": row["host"], "count": int(row["count"]), "last_seen_at": row["last_seen_at"], "action": action})
    return found


async def prune(db: Database, retention_days: int = RETENTION_DAYS) -> int:
    """Delete rows older than the retention; answers how many went."""
    cutoff = to_iso(utc_now() - timedelta(days=retention_days))
    return await db.execute("DELETE FROM egress_audit WHERE created_at < ?", (cutoff,))
