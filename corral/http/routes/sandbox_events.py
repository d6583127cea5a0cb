"""Sandbox event and log streams (SSE), resumable with `Last-Event-ID` for 15 minutes."""

from __future__ import annotations

from quart import Response

from corral.actors import browser_tokens
from corral.actors.sandboxes import EVENT_TYPES, LOG_TYPES

from ..context import RequestContext
from ..routing import Router
from ..sse import event_stream
from .sandboxes import _sandbox

router = Router("sandbox streams")


async def _events(ctx: RequestContext, id: str) -> Response:
    sandbox = await _sandbox(ctx, id)
    return event_stream(ctx, resource_type="sandbox", resource_id=sandbox.id, types=EVENT_TYPES)


@router.get(
    "/sandboxes/{id}/events",
    summary="SSE: the sandbox's events (lifecycle, exec, processes, preview, idle)",
    scope="sandboxes:read",
    auth="ticket",
    content_type="text/event-stream",
    ticket_purpose=browser_tokens.TICKET_PURPOSE,
)
async def events(ctx: RequestContext, id: str) -> Response:
    return await _events(ctx, id)


@router.get(
    "/sandboxes/{id}/events/stream",
    summary="SSE: the same stream as /sandboxes/{id}/events",
    scope="sandboxes:read",
    auth="ticket",
    content_type="text/event-stream",
    ticket_purpose=browser_tokens.TICKET_PURPOSE,
)
async def events_stream(ctx: RequestContext, id: str) -> Response:
    return await _events(ctx, id)


@router.get(
    "/sandboxes/{id}/logs/stream",
    summary="SSE: every output line of the sandbox's execs and processes",
    scope="sandboxes:read",
    auth="ticket",
    content_type="text/event-stream",
    ticket_purpose=browser_tokens.TICKET_PURPOSE,
)
async def logs_stream(ctx: RequestContext, id: str) -> Response:
    sandbox = await _sandbox(ctx, id)
    return event_stream(ctx, resource_type="sandbox", resource_id=sandbox.id, types=LOG_TYPES)
