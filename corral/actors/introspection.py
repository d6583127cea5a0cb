"""Introspection: what `GET /api/v1/admin/actors[/{kind}/{id}]` shows.

Plain JSON-ready dicts, computed from the cells without touching the actors, so
introspection works even on an actor that is stuck in a long handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from corral.actors.actor import Actor
from corral.actors.supervisor import ActorCell, CellStatus


@dataclass(frozen=True)
class FailureRecord:
    """A supervisor's give-up, kept after the cell is gone so operators can see it."""

    kind: str
    id: str
    state: str | None
    restarts: int
    crashes: int
    last_error: str | None
    failed_at: float
    created_at: float


def _seconds(since: float | None, now: float) -> float | None:
    return None if since is None else round(now - since, 3)


def describe_cell(cell: ActorCell) -> dict[str, Any]:
    now = trio.current_time()
    current = cell.current
    actor = cell.actor
    return {
        "kind": cell.kind,
        "id": cell.id,
        "status": str(cell.status),
        "state": cell.state,
        "mailbox_depth": cell.mailbox.depth,
        "mailbox_capacity": cell.mailbox.capacity,
        "blocked_senders": cell.mailbox.blocked_senders,
        "busy": current is not None,
        "current_message": type(current.message).__name__ if current is not None else None,
        "children": cell.children,
        "handled": cell.handled,
        "restarts": cell.restarts,
        "recent_crashes": len(cell.crash_times),
        "last_error": cell.last_error,
        "last_error_seconds_ago": _seconds(cell.last_error_at, now),
        "age_seconds": _seconds(cell.created_at, now),
        "idle_seconds": _seconds(cell.last_activity, now),
        "tenant_id": cell.tenant_id,
        "details": _details(actor),
    }


def _details(actor: Actor | None) -> dict[str, Any]:
    if actor is None:
        return {}
    try:
        return actor.describe()
    except Exception as error:  # introspection must work on a misbehaving actor
        return {"describe_error": f"{type(error).__name__}: {error}"}


def describe_failure(failure: FailureRecord) -> dict[str, Any]:
    now = trio.current_time()
    return {
        "kind": failure.kind,
        "id": failure.id,
        "status": str(CellStatus.FAILED),
        "state": failure.state,
        "mailbox_depth": 0,
        "restarts": failure.restarts,
        "recent_crashes": failure.crashes,
        "last_error": failure.last_error,
        "failed_seconds_ago": _seconds(failure.failed_at, now),
        "age_seconds": _seconds(failure.created_at, now),
    }
