"""Agent runtime profiles (contract §14): create, list, get (id or name), patch, delete."""

from __future__ import annotations

from corral.actors import agent_profiles
from corral.actors.agent_profiles import ProfileRecord

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router

router = Router("agent runtime profiles")


def _audit(ctx: RequestContext, record: ProfileRecord) -> None:
    ctx.audit.update(workspace_id=record.workspace_id, resource_type="agent_runtime_profile", resource_id=record.id)


async def _profile(ctx: RequestContext, id: str) -> ProfileRecord:
    record = await agent_profiles.find_profile(ctx.platform, ctx.tenant_id, id, key_workspace_id=ctx.principal.workspace_id)
    _audit(ctx, record)
    return record


@router.post(
    "/agent-runtime-profiles",
    summary="Create a profile (env sealed, never returned; is_default makes it the default for its kinds)",
    scope="agents:write",
    action="agent_runtime_profiles.create",
    status=201,
    request=agent_profiles.NewProfile,
    idempotent=True,
)
async def create(ctx: RequestContext) -> Reply:
    body = await ctx.body(agent_profiles.NewProfile)
    record = await agent_profiles.create_profile(ctx.platform, ctx.tenant_id, body, key_workspace_id=ctx.principal.workspace_id)
    _audit(ctx, record)
    return data(agent_profiles.profile_public(record), 201)


@router.get(
    "/agent-runtime-profiles",
    summary="The tenant's profiles (without env values)",
    scope="agents:read",
    query={"workspace_id": "only this workspace's profiles"},
)
async def list_(ctx: RequestContext) -> Reply:
    workspace_id = ctx.query("workspace_id")
    if workspace_id is not None:
        workspace_id = require_uuid(workspace_id, "workspace_id")
    records = await agent_profiles.list_profiles(ctx.platform, ctx.tenant_id, workspace_id)
    key_workspace = ctx.principal.workspace_id
    if key_workspace is not None:
        records = [r for r in records if r.workspace_id in (None, key_workspace)]
    return data([agent_profiles.profile_public(record) for record in records])


@router.get("/agent-runtime-profiles/{id}", summary="One profile, by id or name", scope="agents:read")
async def get(ctx: RequestContext, id: str) -> Reply:
    return data(agent_profiles.profile_public(await _profile(ctx, id)))


@router.patch(
    "/agent-runtime-profiles/{id}",
    summary="Change a profile; env and secret_ids replace the whole set when given",
    scope="agents:write",
    action="agent_runtime_profiles.update",
    request=agent_profiles.ProfileChange,
)
async def patch(ctx: RequestContext, id: str) -> Reply:
    record = await _profile(ctx, id)
    change = await ctx.body(agent_profiles.ProfileChange)
    return data(agent_profiles.profile_public(await agent_profiles.update_profile(ctx.platform, record, change)))


@router.delete(
    "/agent-runtime-profiles/{id}",
    summary="Delete a profile; computers and runs it was applied to keep what they got",
    scope="agents:write",
    action="agent_runtime_profiles.delete",
)
async def delete(ctx: RequestContext, id: str) -> Reply:
    record = await _profile(ctx, id)
    await agent_profiles.delete_profile(ctx.platform, record)
    return data({"id": record.id, "deleted": True})
