"""Sandbox environment variables: list (keys only), upsert, delete."""

from __future__ import annotations

from corral.actors.sandboxes import env

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router
from .sandboxes import _sandbox

router = Router("sandbox env")

@router.get("/sandboxes/{id}/env", summary="The sandbox's variables: keys and flags, never values", scope="sandboxes:read")
async def list_(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    return data([env.entry_public(row) for row in await env.list_vars(ctx.platform, sandbox.id)])


@router.put(
    "/sandboxes/{id}/env",
    summary="Set variables (upsert; keys not listed are left alone); used by every later exec and process",
    scope="sandboxes:write",
    action="sandboxes.env.update",
    request=env.PutVars,
)
async def put(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    variables = (await ctx.body(env.PutVars)).vars
    rows = await env.put_vars(ctx.platform, sandbox, variables)
    return data([env.entry_public(row) for row in rows])


@router.delete("/sandboxes/{id}/env/{key}", summary="Remove one variable", scope="sandboxes:write", action="sandboxes.env.delete")
async def delete(ctx: RequestContext, id: str, key: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    await env.delete_var(ctx.platform, sandbox.id, key)
    return Reply({"deleted": True, "name": key})
