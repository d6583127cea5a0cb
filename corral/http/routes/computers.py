"""Computers: create, list, get, patch, delete and the lifecycle of the state table.

Bodies are unwrapped (specification rule 6). Exec, files, env, apps, metrics and the
event stream are in `computer_runtime.py`; both use `computer_row` to find a computer.
"""

from __future__ import annotations

from corral.actors import computers

from ..context import RequestContext, require_uuid
from ..replies import Reply, raw
from ..routing import Router

router = Router("computers")

READ, WRITE = "computers:read", "computers:write"

def public(ctx: RequestContext, row: computers.ComputerRecord) -> Reply:
    return raw(computers.computer_public(row, ctx.platform.settings))


def _audit(ctx: RequestContext, row: computers.ComputerRecord) -> None:
    ctx.audit.update(
        workspace_id=row.workspace_id,
        project_id=row.project_id,
        resource_type="computer",
        resource_id=row.id,
        external_workspace_id=row.external_workspace_id,
        external_user_id=row.external_user_id,
        external_project_id=row.external_project_id,
    )


async def computer_row(ctx: RequestContext, id: str, *, change: bool = False) -> computers.ComputerRecord:
    """The caller's computer: `400 invalid computer id`, `404 computer not found`; a
    change also needs membership (`403 not a member of this computer`)."""
    computer_id = require_uuid(id, "computer id")
    principal = ctx.principal
    row = await computers.find_computer(ctx.platform, ctx.tenant_id, computer_id, key_workspace_id=principal.workspace_id)
    _audit(ctx, row)
    if change:
        await computers.require_member(ctx.platform, row, principal.user_id, principal.tenant_role)
    return row


@router.post("/computers", summary="Create a computer (201, status provisioning, vm_id null)", scope=WRITE, action="computers.create", status=201, request=computers.NewComputer)
async def create(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    row = await computers.create_computer(
        ctx.platform, ctx.tenant_id, principal.user_id, await ctx.body(computers.NewComputer), key_workspace_id=principal.workspace_id
    )
    _audit(ctx, row)
    return raw(computers.computer_public(row, ctx.platform.settings), 201)


@router.get("/computers", summary="List computers: {computers: [summary], total}", scope=READ, query={name: f"only computers with this {name}" for name in computers.FILTERS})
async def list_(ctx: RequestContext) -> Reply:
    filters = {name: value for name in computers.FILTERS if (value := ctx.query(name))}
    rows = await computers.list_computers(ctx.platform, ctx.tenant_id, filters, key_workspace_id=ctx.principal.workspace_id)
    return raw({"computers": [computers.computer_summary(row) for row in rows], "total": len(rows)})


@router.get("/computers/{id}", summary="One computer (the full object)", scope=READ)
async def get(ctx: RequestContext, id: str) -> Reply:
    return public(ctx, await computer_row(ctx, id))


@router.patch(
    "/computers/{id}",
    summary="Update agent_session_id (the only updatable field)",
    scope=WRITE,
    action="computers.update",
    request=computers.UpdateComputer,
)
async def patch(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    computers.refuse_fixed_fields(await ctx.json())
    return public(ctx, await computers.update_computer(ctx.platform, row, await ctx.body(computers.UpdateComputer)))


@router.delete("/computers/{id}", summary="Delete a computer and destroy its instance", scope=WRITE, action="computers.delete")
async def delete(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return raw(await computers.delete_computer(ctx.platform, row))


@router.post("/computers/{id}/start", summary="Start a stopped or paused computer", scope=WRITE, action="computers.start")
async def start(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.start_computer(ctx.platform, row))


@router.post("/computers/{id}/stop", summary="Stop a running computer; its files are kept", scope=WRITE, action="computers.stop")
async def stop(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.stop_computer(ctx.platform, row))


@router.post(
    "/computers/{id}/pause",
    summary="Freeze a running computer: processes and memory stay, no CPU and no compute credits until start",
    scope=WRITE,
    action="computers.pause",
)
async def pause(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.pause_computer(ctx.platform, row))


@router.post("/computers/{id}/restart", summary="Stop, then start at once, a running computer", scope=WRITE, action="computers.restart")
async def restart(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.restart_computer(ctx.platform, row))


@router.post("/computers/{id}/clone", summary="A new computer with a copy of this running one (201, provisioning)", scope=WRITE, action="computers.clone", status=201)
async def clone(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    new = await computers.clone_computer(ctx.platform, ctx.principal.user_id, row)
    return raw(computers.computer_public(new, ctx.platform.settings), 201)


@router.post(
    "/computers/{id}/resize",
    summary="Change the size of a stopped computer (limits apply from the next start)",
    scope=WRITE,
    action="computers.resize",
    request=computers.ResizeRequest,
)
async def resize(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.resize_computer(ctx.platform, row, await ctx.body(computers.ResizeRequest)))


@router.post(
    "/computers/{id}/move",
    summary="Move a stopped computer to another region",
    scope=WRITE,
    action="computers.move",
    request=computers.MoveTo,
)
async def move(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return public(ctx, await computers.move_computer(ctx.platform, row, await ctx.body(computers.MoveTo)))


@router.get("/computers/{id}/auto-stop", summary="The auto-stop setting: {auto_stop_seconds, enabled}", scope=READ)
async def get_auto_stop(ctx: RequestContext, id: str) -> Reply:
    return raw(computers.auto_stop_public(await computer_row(ctx, id)))


@router.patch(
    "/computers/{id}/auto-stop",
    summary="Set auto-stop (seconds of inactivity; 0 or null disables)",
    scope=WRITE,
    action="computers.auto_stop",
    request=computers.AutoStop,
)
async def set_auto_stop(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return raw(computers.auto_stop_public(await computers.set_auto_stop(ctx.platform, row, await ctx.body(computers.AutoStop))))
