"""Agent runs (contract §14): create, list, get, cancel, durable events and their
streams, artifacts with bearer and signed downloads, and the run's usage report."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import trio
from quart import Response

from corral.actors import agent_runs
from corral.actors.agent_runs import AgentRunRecord, ArtifactRecord, RunEvent
from corral.actors.bus import SubscriberLagged
from corral.errors import ApiError, not_found, unauthorized
from corral.storage import BlobCorrupted, BlobNotFound, Event

from ..context import RequestContext, require_uuid
from ..params import Integer
from ..replies import Reply, data
from ..routing import Router
from ..sse import CONNECTED, HEARTBEAT, frame, last_event_id, receive_or_heartbeat, sse_response
from .computers import computer_row
from .files import attachment

log = logging.getLogger("corral.http.agent_runs")

router = Router("agent runs")

READ, WRITE = "agents:read", "agents:write"
DOWNLOAD_CHUNK = 1 << 20
PAGE = 500


def _audit(ctx: RequestContext, run: AgentRunRecord) -> None:
    ctx.audit.update(workspace_id=run.workspace_id, resource_type="agent_run", resource_id=run.id)


async def _run(ctx: RequestContext, run_id: str) -> AgentRunRecord:
    run = await agent_runs.find_run(ctx.platform, ctx.tenant_id, run_id)
    _audit(ctx, run)
    return run


@router.post(
    "/agent-runs",
    summary="Run an agent command in a sandbox or computer (wait: the final state, up to timeout)",
    scope=WRITE,
    action="agent_runs.create",
    request=agent_runs.NewAgentRun,
    idempotent=True,
)
async def create(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    body = await ctx.body(agent_runs.NewAgentRun)
    run = await agent_runs.create_run(ctx.platform, ctx.tenant_id, principal.user_id, body, principal.workspace_id)
    _audit(ctx, run)
    return data(agent_runs.run_public(run))


@router.get(
    "/agent-runs",
    summary="The tenant's agent runs, newest first",
    scope=READ,
    query={
        **{name: f"only runs with this {name}" for name in agent_runs.FILTERS},
        "limit": Integer("page size", 20, maximum=agent_runs.MAX_LIMIT),
        "cursor": "next_cursor of the previous page",
    },
)
async def list_(ctx: RequestContext) -> Reply:
    filters = {name: value for name in agent_runs.FILTERS if (value := ctx.query(name))}
    limit = ctx.query_int("limit")
    rows, next_cursor = await agent_runs.list_runs(ctx.platform, ctx.tenant_id, filters, limit, ctx.query("cursor"))
    return data([agent_runs.run_public(row) for row in rows], next_cursor=next_cursor)


@router.get("/agent-runs/{run_id}", summary="One agent run", scope=READ)
async def get(ctx: RequestContext, run_id: str) -> Reply:
    return data(agent_runs.run_public(await _run(ctx, run_id)))


@router.post(
    "/agent-runs/{run_id}/cancel",
    summary="Stop the run's process (SIGTERM, then SIGKILL) and mark it canceled",
    scope=WRITE,
    action="agent_runs.cancel",
    idempotent=True,
)
async def cancel(ctx: RequestContext, run_id: str) -> Reply:
    run = await _run(ctx, run_id)
    return data(agent_runs.run_public(await agent_runs.cancel_run(ctx.platform, run)))


# -- events -------------------------------------------------------------------------------


def _wants_stream(ctx: RequestContext) -> bool:
    """`?stream=true`, or a client that accepts only an event stream (a browser's EventSource)."""
    accept = ctx.request.headers.get("Accept", "")
    return (ctx.query("stream") or "").lower() in ("true", "1") or accept.strip() == "text/event-stream"


def _bus_event_to_public(event: Event) -> dict[str, object]:
    return {name: event.data.get(name) for name in ("id", "run_id", "type", "data", "created_at")}


def _stream(
    ctx: RequestContext,
    *,
    subscribe_filter: Callable[[Event], bool],
    replay: Callable[[str], Awaitable[list[RunEvent]]],
    after: str,
    closes: Callable[[str], bool],
) -> Response:
    """Durable events after `after` from the table, then live ones from the bus (subscribed
    first, so nothing falls between); closed after an event for which `closes(type)`."""
    platform = ctx.platform
    heartbeat = platform.settings.sse_heartbeat_seconds

    async def frames() -> AsyncIterator[bytes]:
        last = after
        greeted = False
        while True:
            with platform.bus.subscribe(subscribe_filter) as live:
                if not greeted:
                    greeted = True
                    yield CONNECTED
                while True:
                    batch = await replay(last)
                    for old in batch:
                        last = old.id
                        yield frame(old.type, old.public(), old.id)
                        if closes(old.type):
                            return
                    if len(batch) < PAGE:
                        break
                while True:
                    try:
                        event = await receive_or_heartbeat(live.receive, heartbeat)
                    except SubscriberLagged:
                        break  # replay from the table after `last`
                    except trio.EndOfChannel:
                        return
                    if event is None:
                        yield HEARTBEAT
                        continue
                    if event.id <= last:
                        continue
                    last = event.id
                    public = _bus_event_to_public(event)
                    yield frame(str(public["type"]), public, event.id)
                    if closes(str(public["type"])):
                        return

    return sse_response(frames())


@router.get(
    "/agent-runs/{run_id}/events",
    summary="The run's durable events in order; ?stream=true: as SSE (existing, then live, closed after the terminal one)",
    scope=READ,
    auth="ticket",
    query={"stream": "true: server-sent events"},
)
async def events(ctx: RequestContext, run_id: str) -> Reply | Response:
    run = await _run(ctx, run_id)
    db = ctx.platform.db
    if not _wants_stream(ctx):
        rows = await agent_runs.store.events_of_run(db, run.id, limit=100_000)
        return data([event.public() for event in rows])
    terminal = frozenset(agent_runs.TERMINAL_EVENTS)
    tenant_id = run.tenant_id

    async def replay(after: str) -> list[RunEvent]:
        return await agent_runs.store.events_of_run(db, run.id, after=after, limit=PAGE)

    return _stream(
        ctx,
        subscribe_filter=lambda e: e.resource_type == "agent_run" and e.resource_id == run.id and e.tenant_id == tenant_id,
        replay=replay,
        after=last_event_id(ctx) or "",
        closes=lambda event_type: event_type in terminal,
    )


@router.get(
    "/computers/{id}/agent/events",
    summary="SSE: the events of every agent run on this computer, live (Last-Event-ID resumes)",
    scope=READ,
    auth="ticket",
    content_type="text/event-stream",
)
async def computer_agent_events(ctx: RequestContext, id: str) -> Response:
    computer = await computer_row(ctx, id)
    db = ctx.platform.db
    tenant_id = computer.tenant_id
    resume = last_event_id(ctx)

    async def replay(after: str) -> list[RunEvent]:
        if resume is None:
            return []  # live only, unless resuming
        return await agent_runs.store.events_of_target(db, tenant_id, computer.id, after=after, limit=PAGE)

    return _stream(
        ctx,
        subscribe_filter=lambda e: e.resource_type == "agent_run" and e.tenant_id == tenant_id and e.data.get("target_id") == computer.id,
        replay=replay,
        after=resume or "",
        closes=lambda event_type: False,
    )


# -- artifacts ----------------------------------------------------------------------------


def _artifact_public(ctx: RequestContext, artifact: ArtifactRecord) -> dict[str, object]:
    url = None
    if artifact.status == "available":
        expires, signature = agent_runs.signed_query(ctx.platform.jwt_secret, artifact.run_id, artifact.id)
        base = ctx.request.host_url.rstrip("/")
        url = f"{base}/api/v1/agent-runs/{artifact.run_id}/artifacts/{artifact.id}/signed?expires={expires}&signature={quote(signature)}"
    return {
        "id": artifact.id,
        "path": artifact.path,
        "name": artifact.name,
        "size_bytes": artifact.size_bytes,
        "content_type": artifact.content_type,
        "status": artifact.status,
        "sha256": artifact.sha256,
        "persisted": bool(artifact.persisted),
        "storage_backend": artifact.storage_backend,
        "persisted_at": artifact.persisted_at,
        "error": artifact.error,
        "signed_download_url": url,
        "created_at": artifact.created_at,
    }


@router.get("/agent-runs/{run_id}/artifacts", summary="The run's artifact records", scope=READ)
async def artifacts(ctx: RequestContext, run_id: str) -> Reply:
    run = await _run(ctx, run_id)
    rows = await agent_runs.store.artifacts_of_run(ctx.platform.db, run.id)
    return data([_artifact_public(ctx, row) for row in rows])


async def _artifact(ctx: RequestContext, run_id: str, artifact_id: str) -> ArtifactRecord:
    artifact = None
    if require_uuid(artifact_id, "artifact id"):
        artifact = await agent_runs.store.artifact(ctx.platform.db, run_id, artifact_id.lower())
    if artifact is None:
        raise not_found("artifact not found", "ARTIFACT_NOT_FOUND")
    return artifact


async def _send(ctx: RequestContext, artifact: ArtifactRecord) -> Response:
    if artifact.status != "available" or artifact.sha256 is None:
        raise ApiError(409, "ARTIFACT_NOT_AVAILABLE", f"artifact is not available: {artifact.error or artifact.status}")
    try:
        path: Path = await ctx.platform.blobs.verified_path(artifact.sha256)
    except BlobNotFound as exc:
        raise ApiError(410, "ARTIFACT_GONE", "the artifact's bytes are no longer stored") from exc
    except BlobCorrupted as exc:
        raise ApiError(500, "ARTIFACT_CORRUPTED", "the stored artifact failed its integrity check") from exc
    inline = (ctx.query("disposition") or "").lower() == "inline"
    disposition = attachment(artifact.name)
    if inline:
        disposition = "inline" + disposition[len("attachment"):]

    async def body() -> AsyncIterator[bytes]:
        async with await trio.open_file(path, "rb") as handle:
            while chunk := await handle.read(DOWNLOAD_CHUNK):
                yield chunk

    response = Response(body(), status=200, content_type=artifact.content_type or "application/octet-stream")
    response.headers["Content-Disposition"] = disposition
    response.headers["Content-Length"] = str(path.stat().st_size)
    response.headers["X-Content-SHA256"] = artifact.sha256
    response.timeout = None
    return response


@router.get(
    "/agent-runs/{run_id}/artifacts/{artifact_id}/download",
    summary="An artifact's bytes (disposition=inline for embedding; default attachment)",
    scope=READ,
    query={"disposition": "inline, or attachment (the default)"},
    content_type="application/octet-stream",
)
async def download(ctx: RequestContext, run_id: str, artifact_id: str) -> Response:
    run = await _run(ctx, run_id)
    return await _send(ctx, await _artifact(ctx, run.id, artifact_id))


@router.get(
    "/agent-runs/{run_id}/artifacts/{artifact_id}/signed",
    summary="An artifact's bytes through its signed_download_url (no bearer; 15 minutes)",
    auth="public",
    query={"expires": "Unix seconds", "signature": "HMAC of run, artifact and expiry", "disposition": "inline or attachment"},
    content_type="application/octet-stream",
)
async def signed_download(ctx: RequestContext, run_id: str, artifact_id: str) -> Response:
    expires_raw, signature = ctx.query("expires") or "", ctx.query("signature") or ""
    refused = unauthorized("the download link is invalid or has expired", code="INVALID_SIGNATURE")
    if not expires_raw.isdigit() or not signature or len(expires_raw) > 12:
        raise refused
    if not agent_runs.signature_valid(ctx.platform.jwt_secret, run_id, artifact_id, int(expires_raw), signature):
        raise refused
    return await _send(ctx, await _artifact(ctx, run_id, artifact_id))


# -- usage --------------------------------------------------------------------------------


@router.post(
    "/agent-runs/usage",
    summary="From inside a run ($CORRAL_USAGE_URL, Bearer $CORRAL_RUN_TOKEN): report AI tokens, charged by the AI prices",
    auth="public",
    request=agent_runs.UsageReport,
    status=201,
)
async def usage(ctx: RequestContext) -> Reply:
    run = await agent_runs.run_of_bearer(ctx.platform, ctx.request.headers.get("Authorization"))
    report = await ctx.body(agent_runs.UsageReport)
    row = await agent_runs.record_usage(ctx.platform, run, report)
    return data(
        {
            "run_id": run.id,
            "transaction_id": row.id,
            "amount_credits": row.amount_credits,
            "provider": row.provider,
            "model": row.model,
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "cost_usd_micros": row.cost_usd_micros,
        },
        201,
    )

