"""Managed databases (contract §13): lifecycle, branches, replicas, credentials.

Backups, restores, logs and metrics are in `database_ops.py`; both find a database
with `database_row` (another tenant's, or a deleted one, is `404 DATABASE_NOT_FOUND`).
Every POST honours `Idempotency-Key`.
"""

from __future__ import annotations

from corral.actors import databases

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router

router = Router("databases")

READ, WRITE = "databases:read", "databases:write"


def _audit(ctx: RequestContext, row: databases.DatabaseRecord) -> None:
    ctx.audit.update(
        workspace_id=row.workspace_id,
        project_id=row.project_id,
        resource_type="database",
        resource_id=row.id,
        external_workspace_id=row.external_workspace_id,
        external_user_id=row.external_user_id,
        external_project_id=row.external_project_id,
    )


async def database_row(ctx: RequestContext, id: str) -> databases.DatabaseRecord:
    database_id = require_uuid(id, "database id")
    row = await databases.find_database(ctx.platform, ctx.tenant_id, database_id, key_workspace_id=ctx.principal.workspace_id)
    _audit(ctx, row)
    return row


def public(row: databases.DatabaseRecord, status: int = 200) -> Reply:
    return data(databases.database_public(row), status)


@router.post(
    "/databases",
    summary="Create a PostgreSQL database (202, status creating; running within about a second)",
    scope=WRITE,
    action="databases.create",
    status=202,
    request=databases.NewDatabase,
    idempotent=True,
)
async def create(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    new = await ctx.body(databases.NewDatabase)
    row = await databases.create_database(ctx.platform, ctx.tenant_id, principal.user_id, new, key_workspace_id=principal.workspace_id)
    _audit(ctx, row)
    return public(row, 202)


@router.get(
    "/databases",
    summary="The tenant's databases (replicas included), newest first",
    scope=READ,
    query={name: f"only databases with this {name}" for name in databases.FILTERS},
)
async def list_(ctx: RequestContext) -> Reply:
    filters = {name: value for name in databases.FILTERS if (value := ctx.query(name))}
    rows = await databases.list_databases(ctx.platform, ctx.tenant_id, filters, key_workspace_id=ctx.principal.workspace_id)
    return data([databases.database_public(row) for row in rows])


@router.get("/databases/{id}", summary="One database", scope=READ)
async def get(ctx: RequestContext, id: str) -> Reply:
    return public(await database_row(ctx, id))


@router.delete("/databases/{id}", summary="Stop the server, destroy its data, free its port", scope=WRITE, action="databases.delete")
async def delete(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data(await databases.delete(ctx.platform, row))


@router.post("/databases/{id}/start", summary="Start a stopped, suspended or failed database", scope=WRITE, action="databases.start", idempotent=True)
async def start(ctx: RequestContext, id: str) -> Reply:
    return public(await databases.start(ctx.platform, await database_row(ctx, id)))


@router.post("/databases/{id}/stop", summary="Stop the server; the data is kept", scope=WRITE, action="databases.stop", idempotent=True)
async def stop(ctx: RequestContext, id: str) -> Reply:
    return public(await databases.stop(ctx.platform, await database_row(ctx, id)))


@router.post("/databases/{id}/restart", summary="Restart the running server", scope=WRITE, action="databases.restart", idempotent=True)
async def restart(ctx: RequestContext, id: str) -> Reply:
    return public(await databases.restart(ctx.platform, await database_row(ctx, id)))


@router.post(
    "/databases/{id}/wake",
    summary="Start a suspended database; a running one is answered unchanged",
    scope=WRITE,
    action="databases.wake",
    idempotent=True,
)
async def wake(ctx: RequestContext, id: str) -> Reply:
    return public(await databases.wake(ctx.platform, await database_row(ctx, id)))


@router.post(
    "/databases/{id}/resize-compute",
    summary="A new size (running: the server restarts with the new limits)",
    scope=WRITE,
    action="databases.resize",
    request=databases.ResizeRequest,
    idempotent=True,
)
async def resize(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return public(await databases.resize(ctx.platform, row, await ctx.body(databases.ResizeRequest)))


@router.post(
    "/databases/{id}/move",
    summary="Another region (running: the server restarts there)",
    scope=WRITE,
    action="databases.move",
    request=databases.MoveTo,
    idempotent=True,
)
async def move(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return public(await databases.move(ctx.platform, row, await ctx.body(databases.MoveTo)))


@router.post(
    "/databases/{id}/branch",
    summary="A new independent database with this one's data at this moment (202, creating)",
    scope=WRITE,
    action="databases.branch",
    status=202,
    request=databases.NewBranch,
    idempotent=True,
)
async def branch(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    new = await databases.branch_database(ctx.platform, ctx.principal.user_id, row, await ctx.body(databases.NewBranch))
    return public(new, 202)


@router.post(
    "/databases/{id}/replicas",
    summary="A streaming, read-only replica of this running primary (202, creating)",
    scope=WRITE,
    action="databases.replica",
    status=202,
    request=databases.NewReplica,
    idempotent=True,
)
async def add_replica(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    new = await databases.add_replica(ctx.platform, ctx.principal.user_id, row, await ctx.body(databases.NewReplica))
    return public(new, 202)


@router.get("/databases/{id}/replicas", summary="The primary's replicas", scope=READ)
async def list_replicas(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data([databases.database_public(replica) for replica in await databases.replicas(ctx.platform, row)])


@router.get(
    "/databases/{id}/credentials",
    summary="The connection contract: {host, port, database, user, password, url, internal_url, sslmode}",
    scope=READ,
)
async def credentials(ctx: RequestContext, id: str) -> Reply:
    return data(await databases.credentials(ctx.platform, await database_row(ctx, id)))


@router.post(
    "/databases/{id}/credentials/rotate",
    summary="A new password; the old one stops working for new connections",
    scope=WRITE,
    action="databases.rotate_credentials",
    idempotent=True,
)
async def rotate(ctx: RequestContext, id: str) -> Reply:
    return data(await databases.rotate(ctx.platform, await database_row(ctx, id)))
