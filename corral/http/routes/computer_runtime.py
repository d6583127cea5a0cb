"""Inside a computer: exec, exec/python, files, env, installed apps, metrics, events.

Exec, files and apps need `running` (`409 COMPUTER_NOT_RUNNING`); an agent that does
not answer is `502 AGENT_UNAVAILABLE`. The files API is the shared one (`files.py`).
"""

from __future__ import annotations

from quart import Response

from corral.actors import computers
from corral.actors.instances import InstanceFiles

from ..context import RequestContext
from ..replies import Reply, raw
from ..routing import Router
from ..sse import event_stream
from .computers import READ, WRITE, computer_row
from .files import mount_file_routes

router = Router("computers")


@router.post(
    "/computers/{id}/exec",
    summary="Run a command (combined output; timeout default 30 s, max 300 s, SIGTERM past it)",
    scope=WRITE,
    action="computers.exec",
    request=computers.ExecRequest,
)
async def exec_(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return raw(await computers.exec_command(ctx.platform, row, await ctx.body(computers.ExecRequest)))


@router.post(
    "/computers/{id}/exec/python",
    summary="Run Python 3 code from a temporary file under /tmp (deleted afterwards)",
    scope=WRITE,
    action="computers.exec_python",
    request=computers.PythonRequest,
)
async def exec_python(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return raw(await computers.exec_python(ctx.platform, row, await ctx.body(computers.PythonRequest)))


@router.get("/computers/{id}/apps", summary="Installed applications, read from the instance: {apps: [{name, version}]}", scope=READ)
async def apps(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return raw({"apps": await computers.list_apps(ctx.platform, row)})


@router.get("/computers/{id}/metrics", summary="CPU and memory series from the instance's cgroups, credits per hour", scope=READ, query={"window": "1h (default), 24h or 7d"})
async def metrics(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return raw(await computers.computer_metrics(ctx.platform, row, ctx.query("window")))


@router.get("/computers/{id}/env", summary="Env var names (values are never returned): {env: [{name, created_at, updated_at}]}", scope=READ)
async def list_env(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return raw({"env": [computers.env_public(r) for r in await computers.list_env(ctx.platform, row.id)]})


@router.post(
    "/computers/{id}/env",
    summary="Set an env var (encrypted at rest; in the instance at boot and in every exec)",
    scope=WRITE,
    action="computers.env.set",
    status=201,
    request=computers.SetEnvVar,
)
async def set_env(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    variable = await ctx.body(computers.SetEnvVar)
    written = await computers.set_env(ctx.platform, row, {variable.name: variable.value})
    return raw(computers.env_public(written[0]), 201)


@router.delete("/computers/{id}/env/{name}", summary="Remove an env var", scope=WRITE, action="computers.env.delete")
async def delete_env(ctx: RequestContext, id: str, name: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    await computers.delete_env(ctx.platform, row.id, name)
    return raw({"name": name, "deleted": True})


@router.get(
    "/computers/{id}/events",
    summary="SSE stream of the computer's events (computer.started, .idle, .stopped, ...); Last-Event-ID resumes",
    auth="ticket",
    scope=READ,
    content_type="text/event-stream",
)
async def events(ctx: RequestContext, id: str) -> Response:
    row = await computer_row(ctx, id)
    return event_stream(ctx, resource_type="computer", resource_id=row.id, types=["computer.*"])


async def _files(ctx: RequestContext, id: str) -> InstanceFiles:
    row = await computer_row(ctx, id, change=ctx.route.scope == WRITE)
    return await computers.files_for(ctx.platform, row)


mount_file_routes(router, "/computers/{id}", _files, read_scope=READ, write_scope=WRITE, noun="computer")
