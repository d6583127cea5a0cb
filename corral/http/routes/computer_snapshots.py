"""Snapshots of a computer's files (contract §10), under `/computers/{id}/snapshots`.

Snapshot bodies are wrapped in `{data: ...}`; a restore answers the computer itself,
unwrapped, like every computer route. Another tenant's computer is 404 `computer not
found` on every route; a snapshot that is not the computer's is 404 `snapshot not
found`. The work is `corral.actors.computers.snapshot_service`'s.
"""

from __future__ import annotations

from corral.actors import computers

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router
from .computers import READ, WRITE, computer_row, public

router = Router("computers")

BASE = "/computers/{id}/snapshots"
ONE = BASE + "/{snapshot_id}"


@router.post(
    BASE,
    summary="Snapshot the computer's files (running, paused or stopped): 201 {data: snapshot}, status creating",
    scope=WRITE,
    action="computers.snapshots.create",
    status=201,
    request=computers.NewSnapshot,
)
async def create(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    record = await computers.take_snapshot(ctx.platform, row, await ctx.body(computers.NewSnapshot))
    return data(computers.snapshot_public(record), 201)


@router.get(BASE, summary="The computer's snapshots, newest first, without deleted ones: {data: [snapshot]}", scope=READ)
async def list_(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return data([computers.snapshot_public(record) for record in await computers.list_snapshots(ctx.platform, row)])


@router.get(ONE, summary="One snapshot: {data: snapshot}", scope=READ)
async def get(ctx: RequestContext, id: str, snapshot_id: str) -> Reply:
    row = await computer_row(ctx, id)
    record = await computers.get_snapshot(ctx.platform, row, require_uuid(snapshot_id, "snapshot id"))
    return data(computers.snapshot_public(record))


@router.post(
    ONE + "/restore",
    summary="Make the computer's files the snapshot's (a running computer is restarted around it): the computer",
    scope=WRITE,
    action="computers.snapshots.restore",
)
async def restore(ctx: RequestContext, id: str, snapshot_id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    restored = await computers.restore_snapshot(ctx.platform, row, require_uuid(snapshot_id, "snapshot id"))
    return public(ctx, restored)


@router.delete(ONE, summary="Delete a snapshot: {data: {id, status: deleted}}; again 409 already_deleted", scope=WRITE, action="computers.snapshots.delete")
async def delete(ctx: RequestContext, id: str, snapshot_id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    return data(await computers.delete_snapshot(ctx.platform, row, require_uuid(snapshot_id, "snapshot id")))
