"""Sandbox background processes: start, list, get, kill, logs, and the live log stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

from quart import Response

from corral.actors.sandboxes import SandboxRecord, processes

from ..context import RequestContext
from ..params import Integer
from ..replies import Reply, data, no_content
from ..routing import Router
from ..sse import CONNECTED, HEARTBEAT, frame, last_event_id, sse_response
from .sandboxes import _sandbox

router = Router("sandbox processes")


async def _process(ctx: RequestContext, id: str, pid: str) -> tuple[SandboxRecord, processes.ProcessRecord]:
    sandbox = await _sandbox(ctx, id)
    return sandbox, await processes.find_process(ctx.platform, sandbox.id, ctx.checked_id("pid", pid))


@router.post(
    "/sandboxes/{id}/processes",
    summary="Start a background process (sandbox env, then the request's env)",
    scope="sandboxes:write",
    action="sandboxes.processes.create",
    status=201,
    request=processes.NewProcess,
)
async def start(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    row = await processes.start_process(ctx.platform, sandbox, await ctx.body(processes.NewProcess))
    return data(processes.process_public(row), 201)


@router.get("/sandboxes/{id}/processes", summary="The sandbox's processes, newest first", scope="sandboxes:read")
async def list_(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    rows = await processes.list_processes(ctx.platform, sandbox.id)
    return data([processes.process_public(row) for row in rows])


@router.get("/sandboxes/{id}/processes/{pid}", summary="One process", scope="sandboxes:read")
async def get(ctx: RequestContext, id: str, pid: str) -> Reply:
    _, row = await _process(ctx, id, pid)
    return data(processes.process_public(row))


@router.delete(
    "/sandboxes/{id}/processes/{pid}",
    summary="Kill a process: SIGTERM to its group, SIGKILL after 5 s; status becomes killed",
    scope="sandboxes:write",
    action="sandboxes.processes.kill",
    status=204,
)
async def kill(ctx: RequestContext, id: str, pid: str) -> Reply:
    sandbox, row = await _process(ctx, id, pid)
    await processes.kill_process(ctx.platform, sandbox.id, row.id)
    return no_content()


@router.get(
    "/sandboxes/{id}/processes/{pid}/logs",
    summary="The last lines of a process's stdout and stderr",
    scope="sandboxes:read",
    query={"tail": Integer("how many of the last lines", processes.DEFAULT_TAIL, minimum=0, maximum=processes.MAX_TAIL)},
)
async def logs(ctx: RequestContext, id: str, pid: str) -> Reply:
    sandbox, row = await _process(ctx, id, pid)
    tail = ctx.query_int("tail")
    return data({"lines": await processes.process_logs(ctx.platform, sandbox.id, row.id, tail)})


@router.get(
    "/sandboxes/{id}/processes/{pid}/stream",
    summary="SSE: the process's log lines live (`event: log`), then `event: exit`",
    scope="sandboxes:read",
    auth="ticket",
    content_type="text/event-stream",
)
async def stream(ctx: RequestContext, id: str, pid: str) -> Response:
    sandbox, row = await _process(ctx, id, pid)
    resume = last_event_id(ctx)
    after = int(resume) if resume is not None and resume.isdigit() else 0
    heartbeat = ctx.platform.settings.sse_heartbeat_seconds
    platform = ctx.platform

    async def frames() -> AsyncIterator[bytes]:
        yield CONNECTED
        async for batch in processes.follow_logs(platform, sandbox.id, row.id, after, heartbeat):
            if isinstance(batch, processes.Ended):
                yield frame("exit", {"pid": row.id, "status": batch.status, "exit_code": batch.exit_code})
                return
            if not batch:
                yield HEARTBEAT
            for line in batch:
                yield frame("log", {"line": line["line"], "ts": line["ts"], "stream": line["stream"]}, str(line["id"]))

    return sse_response(frames())
