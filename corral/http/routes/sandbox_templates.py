"""Sandbox templates and builds (contract §15)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from quart import Response

from corral.actors import templates
from corral.actors.templates import BuildRecord, TemplateRecord
from corral.errors import ApiError

from ..context import RequestContext, require_uuid
from ..params import Id
from ..replies import Reply, data
from ..routing import Router
from ..sse import CONNECTED, HEARTBEAT, frame, last_event_id, sse_response

router = Router("sandbox templates")


def _audit_template(ctx: RequestContext, template: TemplateRecord) -> None:
    ctx.audit.update(workspace_id=template.workspace_id, resource_type="sandbox_template", resource_id=template.id)


def _audit_build(ctx: RequestContext, build: BuildRecord) -> None:
    ctx.audit.update(workspace_id=build.workspace_id, resource_type="sandbox_template_build", resource_id=build.id)


async def _template(ctx: RequestContext, id: str, *, tenant_only: bool = False) -> TemplateRecord | templates.Builtin:
    found = await templates.find_template(ctx.platform, ctx.tenant_id, id, key_workspace_id=ctx.principal.workspace_id)
    if isinstance(found, templates.Builtin):
        if tenant_only:
            raise ApiError(409, "INVALID_STATE", f"{found.name} is a built-in template: it cannot be built or deleted")
        return found
    _audit_template(ctx, found)
    return found


async def _own_template(ctx: RequestContext, id: str) -> TemplateRecord:
    found = await _template(ctx, id, tenant_only=True)
    assert isinstance(found, TemplateRecord)
    return found


async def _build(ctx: RequestContext, id: str) -> BuildRecord:
    build = await templates.find_build(ctx.platform, ctx.tenant_id, id, key_workspace_id=ctx.principal.workspace_id)
    _audit_build(ctx, build)
    return build


async def _public(ctx: RequestContext, found: TemplateRecord | templates.Builtin) -> dict[str, object]:
    if isinstance(found, templates.Builtin):
        return found.public()
    return templates.template_public(found, await templates.latest_build(ctx.platform, found))


@router.post(
    "/sandbox-templates",
    summary="Create a template: its first build (packages, then setup, on base) starts at once",
    scope="sandboxes:write",
    action="sandbox_templates.create",
    status=201,
    request=templates.NewTemplate,
    idempotent=True,
)
async def create(ctx: RequestContext) -> Reply:
    body = await ctx.body(templates.NewTemplate)
    template, build = await templates.create_template(
        ctx.platform, ctx.tenant_id, ctx.principal.user_id, body, key_workspace_id=ctx.principal.workspace_id
    )
    _audit_template(ctx, template)
    return data({"template": templates.template_public(template, build), "build": templates.build_public(build)}, 201)


@router.get(
    "/sandbox-templates",
    summary="The built-in templates and the tenant's",
    scope="sandboxes:read",
    query={"workspace_id": Id("workspace_id", description="only this workspace's templates (built-ins are always listed)")},
)
async def list_(ctx: RequestContext) -> Reply:
    workspace_id = ctx.query("workspace_id")
    if workspace_id is not None:
        workspace_id = require_uuid(workspace_id, "workspace_id")
    found = await templates.list_templates(ctx.platform, ctx.tenant_id, workspace_id, key_workspace_id=ctx.principal.workspace_id)
    return data([
        item.public() if isinstance(item, templates.Builtin) else templates.template_public(item, latest)
        for item, latest in found
    ])


@router.get("/sandbox-templates/{id}", summary="One template, by id or name", scope="sandboxes:read")
async def get(ctx: RequestContext, id: str) -> Reply:
    return data(await _public(ctx, await _template(ctx, id)))


@router.delete(
    "/sandbox-templates/{id}",
    summary="Delete a template (a running build is cancelled); sandboxes made from it keep running",
    scope="sandboxes:write",
    action="sandbox_templates.delete",
)
async def delete(ctx: RequestContext, id: str) -> Reply:
    template = await _own_template(ctx, id)
    await templates.delete_template(ctx.platform, template)
    return data({"id": template.id, "deleted": True})


@router.post(
    "/sandbox-templates/{id}/builds",
    summary="Rebuild the template (409 BUILD_IN_PROGRESS while a build runs)",
    scope="sandboxes:write",
    action="sandbox_templates.rebuild",
    status=201,
    idempotent=True,
)
async def rebuild(ctx: RequestContext, id: str) -> Reply:
    template = await _own_template(ctx, id)
    build = await templates.rebuild(ctx.platform, template, ctx.principal.user_id)
    return data(templates.build_public(build), 201)


@router.get("/sandbox-template-builds/{id}", summary="One build", scope="sandboxes:read")
async def get_build(ctx: RequestContext, id: str) -> Reply:
    return data(templates.build_public(await _build(ctx, id)))


@router.post(
    "/sandbox-template-builds/{id}/cancel",
    summary="Cancel a queued or building build (409 BUILD_ALREADY_TERMINAL otherwise)",
    scope="sandboxes:write",
    action="sandbox_template_builds.cancel",
)
async def cancel(ctx: RequestContext, id: str) -> Reply:
    build = await _build(ctx, id)
    return data(templates.build_public(await templates.cancel_build(ctx.platform, build)))


@router.post(
    "/sandbox-template-builds/{id}/retry",
    summary="A new build of the same template after a failed or cancelled one (409 BUILD_NOT_RETRYABLE otherwise)",
    scope="sandboxes:write",
    action="sandbox_template_builds.retry",
    status=201,
    idempotent=True,
)
async def retry(ctx: RequestContext, id: str) -> Reply:
    build = await _build(ctx, id)
    new = await templates.retry_build(ctx.platform, build, ctx.principal.user_id)
    return data(templates.build_public(new), 201)


@router.get("/sandbox-template-builds/{id}/logs", summary="The build's log lines so far: {lines: [{line, ts}]}", scope="sandboxes:read")
async def logs(ctx: RequestContext, id: str) -> Reply:
    build = await _build(ctx, id)
    lines = await templates.build_logs(ctx.platform, build)
    return data({"lines": [{"line": line.line, "ts": line.ts} for line in lines]})


@router.get(
    "/sandbox-template-builds/{id}/logs/stream",
    summary="SSE: `log {line, ts}` as the build writes them and `status {status}`; closes at a terminal status",
    scope="sandboxes:read",
    auth="ticket",
    content_type="text/event-stream",
)
async def stream(ctx: RequestContext, id: str) -> Response:
    build = await _build(ctx, id)
    resume = last_event_id(ctx)
    after = int(resume) if resume is not None and resume.isdigit() else 0
    platform = ctx.platform
    heartbeat = platform.settings.sse_heartbeat_seconds

    async def frames() -> AsyncIterator[bytes]:
        yield CONNECTED
        quiet = 0.0
        async for item in templates.follow_build(platform, build, after):
            if isinstance(item, templates.StatusChange):
                yield frame("status", {"status": item.status})
                continue
            if not item:
                quiet += 0.25
                if quiet >= heartbeat:
                    quiet = 0.0
                    yield HEARTBEAT
                continue
            quiet = 0.0
            for line in item:
                yield frame("log", {"line": line.line, "ts": line.ts}, str(line.seq))

    return sse_response(frames())
