"""The `sandbox_processes` table: process rows as `ProcessRecord`s.

Reads are for anyone in the package; rows are written by the process actor alone
(made from a draft record on its first activation, see `ProcessActor.create_record`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One background process; `final_logs` is the JSON text of its last lines."""

    id: str
    sandbox_id: str
    tenant_id: str
    name: str
    cmd: str
    cwd: str
    status: str
    exit_code: int | None
    error: str | None
    final_logs: str | None
    log_seq: int
    started_at: str
    exited_at: str | None
    updated_at: str


PROCESSES = RowStore("sandbox_processes", ProcessRecord)


async def of_sandbox(db: Database, sandbox_id: str) -> list[ProcessRecord]:
    rows = await db.fetch_all(
        "SELECT * FROM sandbox_processes WHERE sandbox_id = ? ORDER BY started_at DESC, id DESC", (sandbox_id,)
    )
    return PROCESSES.records(rows)


async def find(db: Database, sandbox_id: str, process_id: str) -> ProcessRecord | None:
    row = await db.fetch_one("SELECT * FROM sandbox_processes WHERE id = ? AND sandbox_id = ?", (process_id, sandbox_id))
    return None if row is None else PROCESSES.record(row)


async def running_ids(db: Database, sandbox_id: str | None = None) -> list[str]:
    """Ids of running processes (of one sandbox, or all)."""
    if sandbox_id is None:
        rows = await db.fetch_all("SELECT id FROM sandbox_processes WHERE status = 'running'")
    else:
        rows = await db.fetch_all(
            "SELECT id FROM sandbox_processes WHERE sandbox_id = ? AND status = 'running'", (sandbox_id,)
        )
    return [str(row["id"]) for row in rows]


async def running_ids_hosted_by(db: Database, node: str) -> list[str]:
    """Ids of running processes of the sandboxes `node` hosts (issue 30: only there does
    the sandbox's actor, and so its agent, answer)."""
    rows = await db.fetch_all(
        "SELECT sandbox_processes.id FROM sandbox_processes JOIN sandboxes ON sandboxes.id = sandbox_processes.sandbox_id"
        " WHERE sandbox_processes.status = 'running' AND (sandboxes.node IS NULL OR sandboxes.node = ?)",
        (node,),
    )
    return [str(row["id"]) for row in rows]
