"""The `databases`, `database_backups` and `database_restores` tables: every query
about them, returning frozen records.

Reads are for anyone in the package; writes are the database actor's alone (a
backup or restore row belongs to its database's actor).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.instances.activity import InstanceDraft
from corral.actors.record import RowStore
from corral.errors import conflict
from corral.storage import Database, Transaction, utc_now_iso

ENGINE = "postgresql"
LIVE = "status != 'deleted'"


@dataclass(frozen=True, slots=True)
class DatabaseRecord:
    """One database row (`password_sealed`: the role's password under the node's key)."""

    id: str
    tenant_id: str
    owner_user_id: str | None
    name: str
    engine: str
    engine_version: str
    status: str
    size: str
    region: str
    role: str
    parent_id: str | None
    primary_id: str | None
    auto_suspend_seconds: int
    port: int
    pg_user: str
    pg_database: str
    password_sealed: bytes | None
    server_restarts: int
    workspace_id: str
    project_id: str
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    error: str | None
    last_activity_at: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """The node that hosts it (contract §20); None for a record made before nodes were recorded."""


@dataclass(frozen=True, slots=True)
class BackupRecord:
    id: str
    tenant_id: str
    database_id: str
    status: str
    method: str
    size_bytes: int | None
    blob_sha256: str | None
    source_user: str
    source_database: str
    error: str | None
    started_at: str
    completed_at: str | None


@dataclass(frozen=True, slots=True)
class RestoreRecord:
    id: str
    tenant_id: str
    database_id: str
    backup_id: str
    status: str
    error: str | None
    started_at: str
    completed_at: str | None


DATABASES = RowStore("databases", DatabaseRecord)
BACKUPS = RowStore("database_backups", BackupRecord)
RESTORES = RowStore("database_restores", RestoreRecord)


@dataclass(frozen=True)
class DatabaseDraft(InstanceDraft):
    """What a new database's row is made from (`ActorSystem.create`)."""

    name: str
    engine_version: str
    size: str
    region: str
    role: str
    parent_id: str | None
    primary_id: str | None
    auto_suspend_seconds: int
    ports: tuple[int, ...]
    """Candidate proxy ports, in order of preference (free on this host when drafted)."""
    pg_user: str
    pg_database: str
    password_sealed: bytes | None


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, database_id: str) -> DatabaseRecord | None:
    return await DATABASES.load(db, database_id)


async def find(db: Database, tenant_id: str, database_id: str) -> DatabaseRecord | None:
    """The tenant's database, unless deleted."""
    row = await db.fetch_one(f"SELECT * FROM databases WHERE id = ? AND tenant_id = ? AND {LIVE}", (database_id, tenant_id))
    return None if row is None else DATABASES.record(row)


async def list_for_tenant(
    db: Database, tenant_id: str, filters: dict[str, str], *, within_workspace: str | None = None
) -> list[DatabaseRecord]:
    scope = [("workspace_id", within_workspace)] if within_workspace is not None else []
    return await DATABASES.where(db, [("tenant_id", tenant_id), *scope, *filters.items()], also=LIVE)


async def live(db: Database) -> list[DatabaseRecord]:
    """Every database not deleted (the proxy listens for each)."""
    return await DATABASES.where(db, [], also=LIVE)


async def in_states(db: Database, *states: str) -> list[DatabaseRecord]:
    marks = ", ".join("?" for _ in states)
    return DATABASES.records(await db.fetch_all(f"SELECT * FROM databases WHERE status IN ({marks})", states))


async def replicas_of(db: Database, primary_id: str) -> list[DatabaseRecord]:
    return await DATABASES.where(db, [("primary_id", primary_id)], also=LIVE, order_by="created_at, id")


async def ports_in_use(db: Database) -> set[int]:
    return {int(row["port"]) for row in await db.fetch_all(f"SELECT port FROM databases WHERE {LIVE}")}


async def backups_of(db: Database, database_id: str) -> list[BackupRecord]:
    return await BACKUPS.where(db, [("database_id", database_id)], order_by="started_at DESC, id")


async def find_backup(db: Database, tenant_id: str, backup_id: str) -> BackupRecord | None:
    found = await BACKUPS.where(db, [("id", backup_id), ("tenant_id", tenant_id)], order_by="id")
    return found[0] if found else None


async def restores_of(db: Database, database_id: str) -> list[RestoreRecord]:
    return await RESTORES.where(db, [("database_id", database_id)], order_by="started_at DESC, id")


_OF_NODE = "(SELECT id FROM databases WHERE node = ? OR node IS NULL)"
"""The databases of a node (and those made before nodes were recorded)."""


async def unfinished_backups(db: Database, node: str) -> list[BackupRecord]:
    """The node's databases' backups a stop cut off (another node's run there)."""
    rows = await db.fetch_all(
        f"SELECT * FROM database_backups WHERE status = 'running' AND database_id IN {_OF_NODE} ORDER BY started_at, id", (node,)
    )
    return BACKUPS.records(rows)


async def unfinished_restores(db: Database, node: str) -> list[RestoreRecord]:
    """The node's databases' restores a stop cut off (another node's run there)."""
    rows = await db.fetch_all(
        f"SELECT * FROM database_restores WHERE status = 'running' AND database_id IN {_OF_NODE} ORDER BY started_at, id", (node,)
    )
    return RESTORES.records(rows)


# -- writes (the database actor's) -------------------------------------------------------------


def name_taken() -> Exception:
    return conflict("DATABASE_NAME_TAKEN", "a database of this name exists in the project")


def create(tx: Transaction, database_id: str, draft: DatabaseDraft, node: str) -> DatabaseRecord:
    """Insert the new database (`creating`): its name free in its project, its port free."""
    project_id = draft.attribution.project_id
    if tx.fetch_one(f"SELECT 1 FROM databases WHERE project_id = ? AND name = ? AND {LIVE}", (project_id, draft.name)):
        raise name_taken()
    port = next(
        (p for p in draft.ports if not tx.fetch_one(f"SELECT 1 FROM databases WHERE port = ? AND {LIVE}", (p,))), None
    )
    if port is None:
        raise conflict("DATABASE_PORTS_EXHAUSTED", "no free database port is left on this node")
    record = DatabaseRecord(
        **draft.fresh_columns(),
        node=node,
        id=database_id,
        name=draft.name,
        engine=ENGINE,
        engine_version=draft.engine_version,
        status="creating",
        size=draft.size,
        region=draft.region,
        role=draft.role,
        parent_id=draft.parent_id,
        primary_id=draft.primary_id,
        auto_suspend_seconds=draft.auto_suspend_seconds,
        port=port,
        pg_user=draft.pg_user,
        pg_database=draft.pg_database,
        password_sealed=draft.password_sealed,
        server_restarts=0,
    )
    DATABASES.insert(tx, record)
    return record


def insert_backup(tx: Transaction, record: BackupRecord) -> None:
    BACKUPS.insert(tx, record)


def insert_restore(tx: Transaction, record: RestoreRecord) -> None:
    RESTORES.insert(tx, record)


async def finish_backup(db: Database, backup_id: str, *, size: int | None, sha256: str | None, error: str | None) -> None:
    await BACKUPS.update(db, backup_id, {
        "status": "failed" if error else "completed", "size_bytes": size, "blob_sha256": sha256, "error": error,
        "completed_at": utc_now_iso(),
    })


async def finish_restore(db: Database, restore_id: str, error: str | None) -> None:
    await RESTORES.update(db, restore_id, {"status": "failed" if error else "completed", "error": error, "completed_at": utc_now_iso()})
