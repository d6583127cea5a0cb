"""Database operations the HTTP layer calls: create, branch, replicas, list, find,
lifecycle, backups, restores, credentials. Each state change goes through the
database's actor; reads use the store."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from corral.actors.nodes import claims, placement
from corral.actors.nodes.gate import require_accepting_work
from corral.actors.nodes.lost import public_error
from corral.actors.ref import ActorRef
from corral.actors.runtime import require_disk_reserve
from corral.actors.tenancy import Attribution, Placement, resolve_attribution
from corral.errors import ApiError, conflict, forbidden, not_found, validation_error
from corral.ids import new_uuid
from corral.models import Rule, model
from corral.net import HOST_NAME
from corral.storage import associated_data
from corral.vm import SIZES
from corral.vm.postgres import ENGINE_VERSION

from . import store
from .actor import PASSWORD_PURPOSE, DatabaseActor, database_not_found, new_password
from .messages import (
    AddReplica,
    Backup,
    Boot,
    Branch,
    Destroy,
    Get,
    Move,
    Resize,
    Restart,
    Restore,
    Rotate,
    Start,
    Stop,
    Wake,
)
from .store import BackupRecord, DatabaseDraft, DatabaseRecord, RestoreRecord

if TYPE_CHECKING:
    from .services import DatabaseServices

SIZE_NAMES = tuple(SIZES)
FILTERS = ("workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id")
MAX_NAME = 63
DEFAULT_AUTO_SUSPEND = 300
MAX_AUTO_SUSPEND = 7 * 24 * 3600
ASK_TIMEOUT = 180.0
STORAGE_BYTES = {"small": 10 << 30, "medium": 20 << 30, "large": 40 << 30}
"""Storage each size is allotted (reported as `storage_bytes`)."""
PUBLIC_FIELDS = (
    "id", "name", "engine", "engine_version", "status", "size", "region", "node", "role", "parent_id", "primary_id",
    "auto_suspend_seconds", "workspace_id", "project_id", "external_workspace_id", "external_user_id",
    "external_project_id", "created_at", "updated_at",
)


def database_public(row: DatabaseRecord) -> dict[str, Any]:
    limits = SIZES[row.size]
    public = {name: getattr(row, name) for name in PUBLIC_FIELDS}
    public.update(vcpus=int(limits.vcpus), memory_mb=limits.memory_mb, storage_bytes=STORAGE_BYTES[row.size])
    if row.error:
        public["error"] = public_error(row.error)
    return public


def backup_public(row: BackupRecord) -> dict[str, Any]:
    public = {name: getattr(row, name) for name in ("id", "database_id", "status", "method", "size_bytes", "started_at", "completed_at")}
    if row.error:
        public["error"] = row.error
    return public


def restore_public(row: RestoreRecord) -> dict[str, Any]:
    public = {name: getattr(row, name) for name in ("id", "database_id", "backup_id", "status", "started_at", "completed_at")}
    if row.error:
        public["error"] = row.error
    return public


def _name_problem(value: str) -> str | None:
    return None if value.strip() else "must not be blank"


Name = Annotated[str, Rule(max_length=MAX_NAME, check=_name_problem, message=f"must be a string of at most {MAX_NAME} characters")]
AutoSuspend = Annotated[
    int | None,
    Rule(minimum=0, maximum=MAX_AUTO_SUSPEND, message=f"must be an integer from 0 (never) to {MAX_AUTO_SUSPEND}",
         description=f"seconds without connections before the database is suspended; 0 never; default {DEFAULT_AUTO_SUSPEND}"),
]


@model
class NewDatabase(Placement):
    """A new PostgreSQL database (asynchronous: `creating`, then `running`)."""

    name: Name
    engine: Annotated[str, Rule(description="only `postgresql`")] = "postgresql"
    size: Literal[SIZE_NAMES] = "small"  # type: ignore[valid-type]
    auto_suspend_seconds: AutoSuspend = None
    region: Annotated[
        str | None, Rule(description="one of CORRAL_REGIONS: placed on a node of that region (default: the node that places it)")
    ] = None


@model
class NewBranch:
    name: Name
    auto_suspend_seconds: AutoSuspend = None


@model
class NewReplica:
    name: Annotated[str | None, Rule(max_length=MAX_NAME, message=f"must be a string of at most {MAX_NAME} characters")] = None


@model
class ResizeRequest:
    size: Literal[SIZE_NAMES]  # type: ignore[valid-type]


@model
class MoveTo:
    region: Annotated[str, Rule(description="one of the node's regions (CORRAL_REGIONS)")]


@model
class RestoreRequest:
    backup_id: Annotated[str, Rule(format="uuid", description="a completed backup of any database of the tenant")]


def regions(platform: DatabaseServices) -> list[str]:
    names = [name.strip() for name in platform.settings.regions.split(",") if name.strip()]
    return names or ["local"]


_IDENT = re.compile(r"[^a-z0-9_]+")


def pg_identifier(name: str, fallback: str) -> str:
    """A PostgreSQL identifier from a name: lowercase letters, digits and `_`, starting
    with a letter, at most 48 characters (room for a suffix within 63)."""
    text = _IDENT.sub("_", name.lower()).strip("_")[:48].strip("_")
    if not text or not text[0].isalpha():
        text = f"{fallback}_{text}".strip("_")[:48]
    return text


def _seal(platform: DatabaseServices, tenant_id: str, database_id: str, password: str) -> bytes:
    return platform.secrets.encrypt_text(password, associated_data(tenant_id, database_id, PASSWORD_PURPOSE))


async def _ports(platform: DatabaseServices) -> tuple[int, ...]:
    node = platform.databases
    return node.free_ports(await store.ports_in_use(platform.db))


async def _create(
    platform: DatabaseServices, attribution: Attribution, owner: str | None, *, name: str, size: str, region: str,
    role: str = "primary", parent_id: str | None = None, primary_id: str | None = None, auto_suspend: int,
    pg_user: str | None = None, pg_database: str | None = None, password: str | None = None,
) -> tuple[DatabaseRecord, ActorRef[DatabaseActor]]:
    require_disk_reserve(platform.settings)  # 503 below the node's disk reserve (contract §18)
    await require_accepting_work(platform.db, platform.settings.node_name)  # 503 while draining (§20)
    database_id = new_uuid()
    database = pg_database or pg_identifier(name, "db")
    draft = DatabaseDraft(
        attribution=attribution,
        owner_user_id=owner,
        name=name,
        engine_version=ENGINE_VERSION,
        size=size,
        region=region,
        role=role,
        parent_id=parent_id,
        primary_id=primary_id,
        auto_suspend_seconds=auto_suspend,
        ports=await _ports(platform),
        pg_user=pg_user or f"{database[:40]}_user",
        pg_database=database,
        password_sealed=None if password is None else _seal(platform, attribution.tenant_id, database_id, password),
    )
    await claims.bind(platform.db, database_id)  # placement's claim: from its row on, the row counts
    ref = await platform.system.create(DatabaseActor, database_id, draft)
    record: DatabaseRecord = await ref.ask(Get())
    await listen(platform, record)
    return record, ref


async def create_database(
    platform: DatabaseServices, tenant_id: str, owner: str | None, new: NewDatabase, *, key_workspace_id: str | None = None
) -> DatabaseRecord:
    if new.engine != "postgresql":
        raise validation_error({"engine": "only postgresql is offered"}, "unsupported engine")
    if key_workspace_id is not None:
        if new.workspace_id not in (None, key_workspace_id) or new.workspace_slug or new.workspace_name:
            raise forbidden("this key is restricted to one workspace; give its workspace_id or none")
        new = dataclasses.replace(new, workspace_id=key_workspace_id)
    region = placement.region_of(platform.settings.regions, platform.settings.node_region, new.region)
    attribution = await resolve_attribution(platform.db, tenant_id, new, owner)
    auto_suspend = DEFAULT_AUTO_SUSPEND if new.auto_suspend_seconds is None else new.auto_suspend_seconds
    record, ref = await _create(
        platform, attribution, owner, name=new.name.strip(), size=new.size, region=region,
        auto_suspend=auto_suspend, password=new_password(),
    )
    await ref.ask(Boot())
    return record


async def branch_database(platform: DatabaseServices, owner: str | None, source: DatabaseRecord, new: NewBranch) -> DatabaseRecord:
    """A new primary with the source's data at this moment, independent afterwards."""
    source_ref = await platform.system.get(DatabaseActor, source.id)
    await source_ref.ask(Branch(), timeout=ASK_TIMEOUT)
    auto_suspend = source.auto_suspend_seconds if new.auto_suspend_seconds is None else new.auto_suspend_seconds
    record, ref = await _create(
        platform, Attribution.of(source), owner, name=new.name.strip(), size=source.size, region=source.region,
        parent_id=source.id, auto_suspend=auto_suspend, password=new_password(),
    )
    await ref.ask(Boot(clone_source=source.id))
    return record


async def add_replica(platform: DatabaseServices, owner: str | None, primary: DatabaseRecord, new: NewReplica) -> DatabaseRecord:
    """A streaming, read-only replica: its own server and port, the primary's role and data.
    Placement may have sent the request to another node than the primary's (issue 30):
    the primary's actor lives there, so its row says whether it can take one."""
    if primary.node in (None, platform.settings.node_name):
        primary_ref = await platform.system.get(DatabaseActor, primary.id)
        await primary_ref.ask(AddReplica(), timeout=ASK_TIMEOUT)
    elif primary.role != "primary":
        raise conflict("INVALID_STATE", "a replica cannot have replicas; add one to its primary")
    elif primary.status != "running":
        raise conflict("INVALID_STATE", "database must be running to add a replica")
    count = len(await store.replicas_of(platform.db, primary.id))
    name = (new.name or "").strip() or f"{primary.name[:50]}-replica-{count + 1}"
    record, ref = await _create(
        platform, Attribution.of(primary), owner, name=name, size=primary.size, region=primary.region, role="replica",
        primary_id=primary.id, auto_suspend=0, pg_user=primary.pg_user, pg_database=primary.pg_database,
    )
    await ref.ask(Boot())
    return record


async def find_database(
    platform: DatabaseServices, tenant_id: str, database_id: str, *, key_workspace_id: str | None = None
) -> DatabaseRecord:
    record = await store.find(platform.db, tenant_id, database_id)
    if record is None or (key_workspace_id is not None and record.workspace_id != key_workspace_id):
        raise database_not_found()
    return record


async def list_databases(
    platform: DatabaseServices, tenant_id: str, filters: dict[str, str], *, key_workspace_id: str | None = None
) -> list[DatabaseRecord]:
    chosen = {column: value for column, value in filters.items() if column in FILTERS}
    return await store.list_for_tenant(platform.db, tenant_id, chosen, within_workspace=key_workspace_id)


async def replicas(platform: DatabaseServices, primary: DatabaseRecord) -> list[DatabaseRecord]:
    return await store.replicas_of(platform.db, primary.id)


async def ask(platform: DatabaseServices, database_id: str, message: Any) -> Any:
    ref = await platform.system.get(DatabaseActor, database_id)
    return await ref.ask(message, timeout=ASK_TIMEOUT)


async def start(platform: DatabaseServices, row: DatabaseRecord) -> DatabaseRecord:
    record: DatabaseRecord = await ask(platform, row.id, Start())
    return record


async def stop(platform: DatabaseServices, row: DatabaseRecord) -> DatabaseRecord:
    record: DatabaseRecord = await ask(platform, row.id, Stop())
    return record


async def restart(platform: DatabaseServices, row: DatabaseRecord) -> DatabaseRecord:
    record: DatabaseRecord = await ask(platform, row.id, Restart())
    return record


async def wake(platform: DatabaseServices, row: DatabaseRecord) -> DatabaseRecord:
    record: DatabaseRecord = await ask(platform, row.id, Wake())
    return record


async def resize(platform: DatabaseServices, row: DatabaseRecord, request: ResizeRequest) -> DatabaseRecord:
    record: DatabaseRecord = await ask(platform, row.id, Resize(request.size))
    return record


async def move(platform: DatabaseServices, row: DatabaseRecord, request: MoveTo) -> DatabaseRecord:
    offered = regions(platform)
    if request.region not in offered:
        raise validation_error({"region": f"unknown region; one of {', '.join(offered)}"})
    record: DatabaseRecord = await ask(platform, row.id, Move(request.region))
    return record


async def delete(platform: DatabaseServices, row: DatabaseRecord) -> dict[str, Any]:
    await ask(platform, row.id, Destroy())
    return {"id": row.id, "status": "deleted"}


async def backup(platform: DatabaseServices, row: DatabaseRecord) -> BackupRecord:
    record: BackupRecord = await ask(platform, row.id, Backup(new_uuid()))
    return record


async def list_backups(platform: DatabaseServices, row: DatabaseRecord) -> list[BackupRecord]:
    return await store.backups_of(platform.db, row.id)


async def find_backup(platform: DatabaseServices, row: DatabaseRecord, backup_id: str) -> BackupRecord:
    record = await store.find_backup(platform.db, row.tenant_id, backup_id)
    if record is None or record.database_id != row.id:
        raise not_found("backup not found", "BACKUP_NOT_FOUND")
    return record


async def restore(platform: DatabaseServices, row: DatabaseRecord, request: RestoreRequest) -> RestoreRecord:
    """Restore a completed backup of any of the tenant's databases into `row`."""
    backup_row = await store.find_backup(platform.db, row.tenant_id, request.backup_id.lower())
    if backup_row is None:
        raise not_found("backup not found", "BACKUP_NOT_FOUND")
    record: RestoreRecord = await ask(platform, row.id, Restore(new_uuid(), backup_row))
    return record


async def list_restores(platform: DatabaseServices, row: DatabaseRecord) -> list[RestoreRecord]:
    return await store.restores_of(platform.db, row.id)


# -- credentials ---------------------------------------------------------------------------------


async def credentials(platform: DatabaseServices, row: DatabaseRecord) -> dict[str, Any]:
    """The connection contract: the proxy's host and port, the role, its password."""
    owner = row
    if row.role == "replica" and row.primary_id:
        owner = await store.load(platform.db, row.primary_id) or row
    sealed = owner.password_sealed
    if sealed is None:
        raise ApiError(409, "INVALID_STATE", "the database has no credentials (its primary was deleted)")
    password = platform.secrets.decrypt_text(bytes(sealed), associated_data(owner.tenant_id, owner.id, PASSWORD_PURPOSE))
    node = platform.databases
    user, database, port = row.pg_user, row.pg_database, row.port

    def url(host: str) -> str:
        return f"postgresql://{user}:{password}@{host}:{port}/{database}?sslmode=disable"

    return {
        "host": node.host,
        "port": port,
        "database": database,
        "user": user,
        "password": password,
        "url": url(node.host),
        "internal_url": url(HOST_NAME),
        "internal_host": HOST_NAME,
        "sslmode": "disable",
    }


async def rotate(platform: DatabaseServices, row: DatabaseRecord) -> dict[str, Any]:
    record: DatabaseRecord = await ask(platform, row.id, Rotate())
    return await credentials(platform, record)


# -- the proxy's listeners ---------------------------------------------------------------------------


async def listen(platform: DatabaseServices, row: DatabaseRecord) -> None:
    """Accept the database's clients on its port at the API's host and, with the instance
    network up (made here when needed), at the bridge address."""
    await platform.runtime.driver()
    await platform.databases.proxy.listen(row.id, row.port, platform.databases.listen_hosts(True))
