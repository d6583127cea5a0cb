"""The event log: every platform event, ULID-ordered, replayable for 15 minutes.

ULIDs are generated monotonically within this process (`corral.ids`), so the ids
of one resource's events sort in the order they were appended even within one
millisecond; that is what `Last-Event-ID` replay relies on.

On PostgreSQL the row's insert also notifies the other nodes (`remote_events`), in the
same statement, so the notification goes out when the row commits.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from corral.ids import new_ulid
from corral.storage.clock import to_iso, utc_now, utc_now_iso
from corral.storage.database import Database

DEFAULT_RETENTION_SECONDS = 15 * 60

_INSERT = (
    "INSERT INTO events (id, tenant_id, resource_type, resource_id, type, data, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
NOTIFY_CHANNEL = "corral_events"
_INSERT_AND_NOTIFY = f"WITH e AS ({_INSERT} RETURNING id) SELECT pg_notify('{NOTIFY_CHANNEL}', ? || id) FROM e"
"""One statement, so batching in the write-behind queue costs no extra round trip;
the payload is `<origin>:<event id>`."""


def new_event_id() -> str:
    return new_ulid()


@dataclass(frozen=True)
class Event:
    type: str
    resource_type: str
    resource_id: str
    data: dict[str, Any]
    tenant_id: str | None = None
    id: str = field(default_factory=new_event_id)
    created_at: str = field(default_factory=utc_now_iso)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "tenant_id": self.tenant_id,
            "resource_type": self.resource_type,
            "resource_id": self.resource_id,
            "data": self.data,
            "created_at": self.created_at,
        }


def _from_row(row: dict[str, Any]) -> Event:
    return Event(
        id=row["id"],
        type=row["type"],
        tenant_id=row["tenant_id"],
        resource_type=row["resource_type"],
        resource_id=row["resource_id"],
        data=json.loads(row["data"]),
        created_at=row["created_at"],
    )


class EventLog:
    def __init__(self, db: Database, retention_seconds: int = DEFAULT_RETENTION_SECONDS) -> None:
        self.db = db
        self.retention_seconds = retention_seconds
        self.origin = secrets.token_hex(6)
        """Names this process in its notifications: its listener skips its own."""
        self.notify_prefix = f"{self.origin}:"
        self._notifies = db.dialect == "postgresql"

    @property
    def queues_appends(self) -> bool:
        """Whether `append` only queues (the store's writer runs): it then never suspends."""
        return self.db.later.running

    async def append(self, event: Event) -> Event:
        """Queue the event's row (`Database.later`): publishing waits for no commit;
        this node's replays flush first, so none of them misses it."""
        row = (
            event.id,
            event.tenant_id,
            event.resource_type,
            event.resource_id,
            event.type,
            json.dumps(event.data, separators=(",", ":")),
            event.created_at,
        )
        if self._notifies:
            await self.db.later.add(_INSERT_AND_NOTIFY, (*row, self.notify_prefix))
        else:
            await self.db.later.add(_INSERT, row)
        return event

    async def of_types(self, types: Sequence[str], *, after: str = "", limit: int = 1000) -> list[Event]:
        """Retained events of the given types (of every resource), in id order, those
        after `after`: what a consumer that missed events replays (the webhook dispatcher)."""
        marks = ", ".join("?" for _ in types)
        await self.db.later.flush()
        rows = await self.db.fetch_all(
            f"SELECT * FROM events WHERE created_at >= ? AND id > ? AND type IN ({marks}) ORDER BY id LIMIT ?",
            (self._cutoff(), after, *types, limit),
        )
        return [_from_row(row) for row in rows]

    async def with_ids(self, ids: Sequence[str]) -> list[Event]:
        """The committed events of `ids` (those still retained), in id order: what another
        node's notifications name. No flush: this node's own queue is not in question."""
        marks = ", ".join("?" for _ in ids)
        rows = await self.db.fetch_all(f"SELECT * FROM events WHERE id IN ({marks}) ORDER BY id", tuple(ids))
        return [_from_row(row) for row in rows]

    async def after(self, after: str, *, limit: int = 1000) -> list[Event]:
        """Committed events of every resource with ids after `after`, in id order (a
        catch-up after a lost LISTEN connection). No flush, as for `with_ids`."""
        rows = await self.db.fetch_all("SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (after, limit))
        return [_from_row(row) for row in rows]

    async def list(
        self,
        resource_type: str,
        resource_id: str,
        *,
        after: str | None = None,
        limit: int = 1000,
    ) -> list[Event]:
        """A resource's retained events in id order, those after `after` when given."""
        cutoff = self._cutoff()
        await self.db.later.flush()
        rows = await self.db.fetch_all(
            "SELECT * FROM events WHERE resource_type = ? AND resource_id = ?"
            " AND id > ? AND created_at >= ? ORDER BY id LIMIT ?",
            (resource_type, resource_id, after or "", cutoff, limit),
        )
        return [_from_row(row) for row in rows]

    async def prune(self) -> int:
        """Drop events older than the retention window; returns how many."""
        return await self.db.execute("DELETE FROM events WHERE created_at < ?", (self._cutoff(),))

    def _cutoff(self) -> str:
        return to_iso(utc_now() - timedelta(seconds=self.retention_seconds))
