"""A database's backups, restores, logs and metrics (contract §13)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from quart import Response

from corral.actors import databases
from corral.actors.databases import logs

from ..context import RequestContext, require_uuid
from ..params import Integer, Param
from ..replies import Reply, data
from ..routing import Router
from ..sse import CONNECTED, HEARTBEAT, frame, sse_response
from .databases import READ, WRITE, database_row

router = Router("databases")

TAIL_QUERY: dict[str, Param | str] = {"tail": Integer("how many of the last lines", logs.DEFAULT_TAIL, minimum=0, maximum=logs.MAX_TAIL)}


@router.post(
    "/databases/{id}/backups",
    summary="An on-demand backup (pg_basebackup into the blob store; 202, running)",
    scope=WRITE,
    action="databases.backup",
    status=202,
    idempotent=True,
)
async def create_backup(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data(databases.backup_public(await databases.backup(ctx.platform, row)), 202)


@router.get("/databases/{id}/backups", summary="The database's backups, newest first", scope=READ)
async def list_backups(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data([databases.backup_public(b) for b in await databases.list_backups(ctx.platform, row)])


@router.get("/databases/{id}/backups/{backup_id}", summary="One backup (404 BACKUP_NOT_FOUND)", scope=READ)
async def get_backup(ctx: RequestContext, id: str, backup_id: str) -> Reply:
    row = await database_row(ctx, id)
    backup_id = require_uuid(backup_id, "backup id")
    return data(databases.backup_public(await databases.find_backup(ctx.platform, row, backup_id)))


@router.post(
    "/databases/{id}/restore",
    summary="Make the database's contents a completed backup's (of it or another of the tenant's; 202, running)",
    scope=WRITE,
    action="databases.restore",
    status=202,
    request=databases.RestoreRequest,
    idempotent=True,
)
async def restore(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    request = await ctx.body(databases.RestoreRequest)
    return data(databases.restore_public(await databases.restore(ctx.platform, row, request)), 202)


@router.get("/databases/{id}/restores", summary="The restores into the database, newest first", scope=READ)
async def list_restores(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data([databases.restore_public(r) for r in await databases.list_restores(ctx.platform, row)])


def _tail(ctx: RequestContext) -> int:
    return ctx.query_int("tail")


@router.get("/databases/{id}/logs", summary="The server's last log lines: {lines: [{line, ts}]}", scope=READ, query=TAIL_QUERY)
async def recent_logs(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data({"lines": await databases.recent_lines(ctx.platform, row, _tail(ctx))})


@router.get(
    "/databases/{id}/logs/stream",
    summary="SSE: `log` events {line, ts}: the last `tail` lines, then live",
    scope=READ,
    auth="ticket",
    query=TAIL_QUERY,
    content_type="text/event-stream",
)
async def stream_logs(ctx: RequestContext, id: str) -> Response:
    row = await database_row(ctx, id)
    tail = _tail(ctx)
    platform = ctx.platform
    heartbeat = platform.settings.sse_heartbeat_seconds

    async def frames() -> AsyncIterator[bytes]:
        yield CONNECTED
        async for record in databases.follow_log(platform, row, tail, idle=heartbeat):
            yield HEARTBEAT if record is None else frame("log", record)

    return sse_response(frames())


@router.get(
    "/databases/{id}/metrics",
    summary="{connections, size_bytes, transactions_per_second, cpu_percent: [{ts, value}], memory_percent: [{ts, value}]}",
    scope=READ,
)
async def metrics(ctx: RequestContext, id: str) -> Reply:
    row = await database_row(ctx, id)
    return data(await databases.database_metrics(ctx.platform, row))
