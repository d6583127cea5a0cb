"""Deployments (contract §12): create under a project, list, get, patch, delete,
publish (from a deployment or a sandbox), versions, promote, rollback, service logs.

Every POST honours `Idempotency-Key` (`idempotent=True`)."""

from __future__ import annotations

from typing import Any

from corral.actors import deployments
from corral.actors.deployments import DeploymentRecord, VersionRecord
from corral.errors import ApiError

from ..context import RequestContext, require_uuid
from ..params import Integer
from ..replies import Reply, data
from ..routing import Router

router = Router("deployments")


def _audit(ctx: RequestContext, deployment: DeploymentRecord) -> None:
    ctx.audit.update(
        workspace_id=deployment.workspace_id,
        project_id=deployment.project_id,
        resource_type="deployment",
        resource_id=deployment.id,
        external_workspace_id=deployment.external_workspace_id,
        external_user_id=deployment.external_user_id,
        external_project_id=deployment.external_project_id,
    )


async def deployment_of(ctx: RequestContext, id: str) -> DeploymentRecord:
    """The tenant's live deployment `id`, else 404 DEPLOYMENT_NOT_FOUND (another tenant's too)."""
    record = await deployments.find_deployment(ctx.platform, ctx.tenant_id, id, key_workspace_id=ctx.principal.workspace_id)
    _audit(ctx, record)
    return record


async def _one(ctx: RequestContext, record: DeploymentRecord) -> dict[str, Any]:
    return await deployments.deployment_public(ctx.platform, record)


async def _publish_reply(ctx: RequestContext, published: deployments.Published) -> Reply:
    platform = ctx.platform
    record, version = published.deployment, published.version
    body = {
        "deployment": {
            "id": record.id, "workspace_id": record.workspace_id, "project_id": record.project_id,
            "active_version_id": record.active_version_id, "state": record.state,
            "public_url": await deployments.public_url(platform.db, platform.settings, record),
        },
        "version": await deployments.version_public(platform, record, version),
        "services": await deployments.services_public(platform, version),
        "promoted": published.promoted,
    }
    return data(body)


@router.post(
    "/projects/{project_id}/deployments",
    summary="Create a deployment in a project (state created; publish to serve it)",
    scope="deployments:write", action="deployments.create", status=201,
    request=deployments.NewDeployment, idempotent=True,
)
async def create(ctx: RequestContext, project_id: str) -> Reply:
    project = await deployments.project_of(
        ctx.platform, ctx.tenant_id, require_uuid(project_id, "project id"), key_workspace_id=ctx.principal.workspace_id
    )
    body = await ctx.body(deployments.NewDeployment)
    record = await deployments.create_deployment(ctx.platform, ctx.tenant_id, project.id, body)
    _audit(ctx, record)
    return data(await _one(ctx, record), 201)


@router.get(
    "/deployments", summary="List deployments, filtered by attribution and state", scope="deployments:read",
    query={name: f"only deployments with this {name}" for name in deployments.FILTERS},
)
async def list_(ctx: RequestContext) -> Reply:
    filters = {name: value for name in deployments.FILTERS if (value := ctx.query(name))}
    rows = await deployments.list_deployments(ctx.platform, ctx.tenant_id, filters, key_workspace_id=ctx.principal.workspace_id)
    return data([await _one(ctx, row) for row in rows], total=len(rows))


@router.get("/deployments/{id}", summary="One deployment", scope="deployments:read")
async def get(ctx: RequestContext, id: str) -> Reply:
    return data(await _one(ctx, await deployment_of(ctx, id)))


@router.patch(
    "/deployments/{id}", summary="Change name, auto_deploy, metadata or external ids", scope="deployments:write",
    action="deployments.update", request=deployments.DeploymentPatch,
)
async def patch(ctx: RequestContext, id: str) -> Reply:
    record = await deployment_of(ctx, id)
    body = await ctx.body(deployments.DeploymentPatch)
    return data(await _one(ctx, await deployments.update_deployment(ctx.platform, record, body)))


@router.delete(
    "/deployments/{id}", summary="Stop services, unroute every URL, mark deleted (versions kept)",
    scope="deployments:write", action="deployments.delete",
)
async def delete(ctx: RequestContext, id: str) -> Reply:
    record = await deployment_of(ctx, id)
    await deployments.delete_deployment(ctx.platform, record)
    return data({"id": record.id, "state": "deleted"})


@router.post(
    "/deployments/{id}/publish",
    summary="Publish a running sandbox into a new version (synchronous; events on /deployments/{id}/events)",
    scope="deployments:write", action="deployments.publish", request=deployments.PublishRequest, idempotent=True,
)
async def publish(ctx: RequestContext, id: str) -> Reply:
    record = await deployment_of(ctx, id)
    body = await ctx.body(deployments.PublishRequest)
    require_uuid(body.source_sandbox_id, "sandbox id")
    return await _publish_reply(ctx, await deployments.publish(ctx.platform, record, body, key_workspace_id=ctx.principal.workspace_id))


@router.post(
    "/sandboxes/{id}/publish",
    summary="Publish this sandbox into deployment_id, or into a new deployment `name` in its project",
    scope="deployments:write", action="deployments.publish", request=deployments.SandboxPublishRequest, idempotent=True,
)
async def publish_sandbox(ctx: RequestContext, id: str) -> Reply:
    sandbox_id = require_uuid(id, "sandbox id")
    sandbox = await deployments.sandbox_of(ctx.platform, ctx.tenant_id, sandbox_id, key_workspace_id=ctx.principal.workspace_id)
    body = await ctx.body(deployments.SandboxPublishRequest)
    if body.deployment_id:
        record = await deployment_of(ctx, body.deployment_id)
    elif body.name:
        new = deployments.NewDeployment(
            name=body.name, external_workspace_id=sandbox.external_workspace_id,
            external_user_id=sandbox.external_user_id, external_project_id=sandbox.external_project_id,
        )
        record = await deployments.create_deployment(ctx.platform, ctx.tenant_id, sandbox.project_id, new)
        _audit(ctx, record)
    else:
        raise ApiError(400, "MISSING_PARAM", "deployment_id or name is required")
    request = deployments.publish_request_for(body, sandbox_id)
    return await _publish_reply(ctx, await deployments.publish(ctx.platform, record, request, key_workspace_id=ctx.principal.workspace_id))


@router.post(
    "/deployments/{id}/rollback", summary="Serve an earlier ready or archived version in production",
    scope="deployments:write", action="deployments.rollback", request=deployments.RollbackRequest, idempotent=True,
)
async def rollback(ctx: RequestContext, id: str) -> Reply:
    record = await deployment_of(ctx, id)
    body = await ctx.body(deployments.RollbackRequest)
    updated, version = await deployments.promote(ctx.platform, record, body.version_id, rollback=True)
    return data(await _switch_reply(ctx, updated, version))


@router.get(
    "/deployments/{id}/versions", summary="Versions, newest first (limit 1-100, default 20; cursor)",
    scope="deployments:read",
    query={**{name: f"only versions with this {name}" for name in deployments.VERSION_FILTERS},
           "limit": Integer("page size", deployments.VERSIONS_DEFAULT_LIMIT, maximum=deployments.VERSIONS_MAX_LIMIT),
           "cursor": "next_cursor of the previous page"},
)
async def versions(ctx: RequestContext, id: str) -> Reply:
    record = await deployment_of(ctx, id)
    limit = ctx.query_int("limit")
    filters = {name: value for name in deployments.VERSION_FILTERS if (value := ctx.query(name))}
    rows, next_cursor = await deployments.list_versions(ctx.platform, record, filters, limit, ctx.query("cursor"))
    return data([await deployments.version_public(ctx.platform, record, row, full=False) for row in rows], next_cursor=next_cursor)


async def _version(ctx: RequestContext, record: DeploymentRecord, version_id: str) -> VersionRecord:
    ctx.checked_id("version_id", version_id)
    return await deployments.find_version(ctx.platform, record, version_id)


@router.get("/deployments/{id}/versions/{version_id}", summary="One version, in full", scope="deployments:read")
async def version(ctx: RequestContext, id: str, version_id: str) -> Reply:
    record = await deployment_of(ctx, id)
    row = await _version(ctx, record, version_id)
    public = await deployments.version_public(ctx.platform, record, row)
    public["services"] = await deployments.services_public(ctx.platform, row)
    return data(public)


@router.post(
    "/deployments/{id}/versions/{version_id}/promote",
    summary="Point production (or another environment) at a ready or archived version",
    scope="deployments:write", action="deployments.promote", request=deployments.PromoteRequest, idempotent=True,
)
async def promote(ctx: RequestContext, id: str, version_id: str) -> Reply:
    record = await deployment_of(ctx, id)
    row = await _version(ctx, record, version_id)
    raw_body = await ctx.request.get_data()
    environment = (await ctx.body(deployments.PromoteRequest)).environment if raw_body.strip() else "production"
    updated, promoted = await deployments.promote(ctx.platform, record, row.id, environment=environment)
    return data(await _switch_reply(ctx, updated, promoted))


async def _switch_reply(ctx: RequestContext, record: DeploymentRecord, version: VersionRecord) -> dict[str, Any]:
    return {"deployment": await _one(ctx, record), "version": await deployments.version_public(ctx.platform, record, version)}


@router.get(
    "/deployments/{id}/services/{service_id}/logs",
    summary="The last output lines of a deployment service's run_command (tail 1-1000, default 200)",
    scope="deployments:read", query={"tail": Integer("lines", 200, maximum=1000)},
)
async def service_logs(ctx: RequestContext, id: str, service_id: str) -> Reply:
    record = await deployment_of(ctx, id)
    ctx.checked_id("service_id", service_id)
    logs = await deployments.service_logs(ctx.platform, record, service_id, ctx.query_int("tail"))
    lines = [{"ts": line.get("ts"), "stream": line.get("stream"), "line": line.get("line")} for line in logs.get("lines", [])]
    return data({"service_id": service_id, "lines": lines})
