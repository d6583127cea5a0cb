"""The snapshot record as the API shows it (contract §10)."""

from __future__ import annotations

from typing import Any

from .store import SnapshotRecord


def snapshot_public(record: SnapshotRecord) -> dict[str, Any]:
    """`{id, computer_id, name, status, size_bytes, created_at, ready_at}`, and `error`
    for a snapshot whose copy failed."""
    public: dict[str, Any] = {
        "id": record.id,
        "computer_id": record.computer_id,
        "name": record.name,
        "status": record.status,
        "size_bytes": record.size_bytes,
        "created_at": record.created_at,
        "ready_at": record.ready_at,
    }
    if record.error:
        public["error"] = record.error
    return public
