"""Sandboxes (contract §4): lifecycle, exec, and the files API below each sandbox."""

from __future__ import annotations

from corral.actors import sandboxes
from corral.actors.instances import InstanceFiles
from corral.errors import ApiError

from ..context import RequestContext, require_uuid
from ..replies import Reply, data, raw
from ..routing import Router
from .files import mount_file_routes

router = Router("sandboxes")

FILTERS = ("workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id", "status")

def _audit(ctx: RequestContext, sandbox: sandboxes.SandboxRecord) -> None:
    ctx.audit.update(
        workspace_id=sandbox.workspace_id,
        project_id=sandbox.project_id,
        resource_type="sandbox",
        resource_id=sandbox.id,
        external_workspace_id=sandbox.external_workspace_id,
        external_user_id=sandbox.external_user_id,
        external_project_id=sandbox.external_project_id,
    )


async def _sandbox(ctx: RequestContext, id: str, *, for_exec: bool = False) -> sandboxes.SandboxRecord:
    sandbox_id = require_uuid(id, "sandbox id")
    find = sandboxes.find_running_sandbox if for_exec else sandboxes.find_sandbox
    row = await find(ctx.platform, ctx.tenant_id, sandbox_id, key_workspace_id=ctx.principal.workspace_id)
    _audit(ctx, row)
    return row


@router.post("/sandboxes", summary="Create a sandbox (status creating, or already running)", scope="sandboxes:write", action="sandboxes.create", status=201, request=sandboxes.NewSandbox)
async def create(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    body = await ctx.body(sandboxes.NewSandbox)
    row = await sandboxes.create_sandbox(
        ctx.platform, ctx.tenant_id, principal.user_id, body, key_workspace_id=principal.workspace_id
    )
    _audit(ctx, row)
    return data(sandboxes.sandbox_public(row), 201)


@router.get("/sandboxes", summary="List sandboxes, filtered by attribution", scope="sandboxes:read", query={name: f"only sandboxes with this {name}" for name in FILTERS})
async def list_(ctx: RequestContext) -> Reply:
    filters = {name: value for name in FILTERS if (value := ctx.query(name))}
    rows = await sandboxes.list_sandboxes(ctx.platform, ctx.tenant_id, filters, key_workspace_id=ctx.principal.workspace_id)
    return data([sandboxes.sandbox_public(row) for row in rows], total=len(rows))


@router.get("/sandboxes/{id}", summary="One sandbox", scope="sandboxes:read")
async def get(ctx: RequestContext, id: str) -> Reply:
    return data(sandboxes.sandbox_public(await _sandbox(ctx, id)))


@router.post("/sandboxes/{id}/stop", summary="Stop a running sandbox; its files are kept", scope="sandboxes:write", action="sandboxes.stop")
async def stop(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(sandboxes.sandbox_public(await sandboxes.lifecycle(ctx.platform, row.id, sandboxes.Stop())))


@router.post("/sandboxes/{id}/start", summary="Start a stopped or suspended sandbox", scope="sandboxes:write", action="sandboxes.start")
async def start(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(sandboxes.sandbox_public(await sandboxes.lifecycle(ctx.platform, row.id, sandboxes.Start())))


@router.post("/sandboxes/{id}/fork", summary="A new sandbox with a copy of this one's files", scope="sandboxes:write", action="sandboxes.fork", status=201)
async def fork(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    new = await sandboxes.fork_sandbox(ctx.platform, ctx.tenant_id, ctx.principal.user_id, row)
    return data(sandboxes.sandbox_public(new), 201)


@router.delete("/sandboxes/{id}", summary="Destroy a sandbox and everything in it", scope="sandboxes:write", action="sandboxes.delete")
async def delete(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    await sandboxes.lifecycle(ctx.platform, row.id, sandboxes.Destroy())
    return data({"id": row.id, "deleted": True})


@router.post(
    "/sandboxes/{id}/exec",
    summary="Run a command under /bin/sh -c (timeout default 30 s, max 300 s)",
    scope="sandboxes:write",
    action="sandboxes.exec",
    request=sandboxes.ExecRequest,
)
async def exec_(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id, for_exec=True)
    return raw(await sandboxes.exec_command(ctx.platform, row, await ctx.body(sandboxes.ExecRequest)))


async def _files(ctx: RequestContext, id: str) -> InstanceFiles:
    row = await _sandbox(ctx, id)
    if row.status not in ("running", "creating"):
        raise ApiError(409, "SANDBOX_NOT_RUNNING", "sandbox is not running")
    return await sandboxes.files_for(ctx.platform, row.id)


mount_file_routes(router, "/sandboxes/{id}", _files, read_scope="sandboxes:read", write_scope="sandboxes:write", noun="sandbox")
