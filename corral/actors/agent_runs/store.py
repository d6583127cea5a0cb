"""The agent-run tables: runs, their durable events and their artifacts.

Reads are for anyone in the package; writes are the run actor's (a run's record,
events and artifacts are all its own), through `RUNS`, `insert_event` and the
artifact functions below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.storage import Database, Row, Transaction

TERMINAL_STATES = ("succeeded", "failed", "canceled")
TERMINAL_EVENTS = ("command_finished", "failed", "canceled")
"""Event types after which nothing more happens to a run (a stream closes after one)."""


@dataclass(frozen=True, slots=True)
class AgentRunRecord:
    """One run row. `command` is the command line actually run (the request's, the
    profile's, or the provider's built-in one)."""

    id: str
    tenant_id: str
    user_id: str | None
    workspace_id: str | None
    agent_run_group_id: str | None
    parent_agent_run_id: str | None
    orchestration_role: str | None
    target_kind: str
    target_id: str
    provider: str
    model: str | None
    prompt: str
    command: str
    cwd: str
    timeout_seconds: int
    agent_runtime_profile_id: str | None
    status: str
    exit_code: int | None
    output: str
    stderr: str
    output_truncated: int
    stderr_truncated: int
    error: str | None
    metadata: dict[str, Any] = field(hash=False)
    started_at: str
    finished_at: str | None
    created_at: str
    updated_at: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATES


RUNS = RowStore("agent_runs", AgentRunRecord, json_columns=("metadata",))


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One durable event of a run (`{id, run_id, type, data, created_at}` in the API)."""

    id: str
    run_id: str
    tenant_id: str
    target_id: str
    type: str
    data: dict[str, Any] = field(hash=False)
    created_at: str

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "type": self.type, "data": self.data, "created_at": self.created_at}


EVENTS = RowStore("agent_run_events", RunEvent, json_columns=("data",))


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """One declared artifact path of a run and what became of it."""

    id: str
    run_id: str
    tenant_id: str
    path: str
    name: str
    size_bytes: int | None
    content_type: str | None
    status: str
    sha256: str | None
    persisted: int
    storage_backend: str | None
    persisted_at: str | None
    error: str | None
    created_at: str


ARTIFACTS = RowStore("agent_run_artifacts", ArtifactRecord)


# -- runs ---------------------------------------------------------------------------------


async def find(db: Database, tenant_id: str, run_id: str) -> AgentRunRecord | None:
    row = await db.fetch_one("SELECT * FROM agent_runs WHERE id = ? AND tenant_id = ?", (run_id, tenant_id))
    return None if row is None else RUNS.record(row)


async def load(db: Database, run_id: str) -> AgentRunRecord | None:
    return await RUNS.load(db, run_id)


async def page(
    db: Database, tenant_id: str, filters: dict[str, str], *, limit: int, before: tuple[str, str] | None
) -> list[AgentRunRecord]:
    """The tenant's runs, newest first, matching `filters` (column = value), at most
    `limit`, older than the cursor `(created_at, id)` when given."""
    clauses, params = ["tenant_id = ?"], [tenant_id]
    for column, value in filters.items():
        clauses.append(f"{RUNS.columns[RUNS.columns.index(column)]} = ?")
        params.append(value)
    if before is not None:
        clauses.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [before[0], before[0], before[1]]
    rows = await db.fetch_all(
        f"SELECT * FROM agent_runs WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*params, limit),
    )
    return RUNS.records(rows)


async def running_ids(db: Database) -> list[str]:
    return [str(row["id"]) for row in await db.fetch_all("SELECT id FROM agent_runs WHERE status = 'running'")]


async def running_ids_followed_by(db: Database, node: str) -> list[str]:
    """Running runs whose target `node` hosts (or whose target has no home, or is gone):
    a run is followed on its target's home, where the target's actor lives (issue 30)."""
    rows = await db.fetch_all(
        "SELECT agent_runs.id FROM agent_runs"
        " LEFT JOIN sandboxes ON agent_runs.target_kind = 'sandbox' AND sandboxes.id = agent_runs.target_id"
        " LEFT JOIN computers ON agent_runs.target_kind = 'computer' AND computers.id = agent_runs.target_id"
        " WHERE agent_runs.status = 'running' AND (COALESCE(sandboxes.node, computers.node) IS NULL"
        " OR COALESCE(sandboxes.node, computers.node) = ?)",
        (node,),
    )
    return [str(row["id"]) for row in rows]


def insert_run(tx: Transaction, record: AgentRunRecord) -> None:
    RUNS.insert(tx, record)


def update_run(tx: Transaction, run_id: str, values: dict[str, Any]) -> None:
    stored = RUNS.row(values)
    assignments = ", ".join(f"{name} = ?" for name in stored)
    tx.execute(f"UPDATE agent_runs SET {assignments} WHERE id = ?", (*stored.values(), run_id))


# -- events -------------------------------------------------------------------------------


def insert_event(tx: Transaction, event: RunEvent) -> None:
    EVENTS.insert(tx, event)


def _events(rows: list[Row]) -> list[RunEvent]:
    return EVENTS.records(rows)


async def events_of_run(db: Database, run_id: str, *, after: str = "", limit: int = 1000) -> list[RunEvent]:
    rows = await db.fetch_all(
        "SELECT * FROM agent_run_events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?", (run_id, after, limit)
    )
    return _events(rows)


async def events_of_target(db: Database, tenant_id: str, target_id: str, *, after: str, limit: int = 1000) -> list[RunEvent]:
    rows = await db.fetch_all(
        "SELECT * FROM agent_run_events WHERE target_id = ? AND tenant_id = ? AND id > ? ORDER BY id LIMIT ?",
        (target_id, tenant_id, after, limit),
    )
    return _events(rows)


# -- artifacts ----------------------------------------------------------------------------


def insert_artifact(tx: Transaction, artifact: ArtifactRecord) -> None:
    ARTIFACTS.insert(tx, artifact)


async def artifacts_of_run(db: Database, run_id: str) -> list[ArtifactRecord]:
    return await ARTIFACTS.where(db, [("run_id", run_id)], order_by="created_at, id")


async def artifact(db: Database, run_id: str, artifact_id: str) -> ArtifactRecord | None:
    row = await db.fetch_one("SELECT * FROM agent_run_artifacts WHERE id = ? AND run_id = ?", (artifact_id, run_id))
    return None if row is None else ARTIFACTS.record(row)
