"""A deployment's event stream (SSE): `deployment.publish.*`, succeeded, failed, rollback.

Resumable with `Last-Event-ID` for as long as the event log keeps events (15 minutes)."""

from __future__ import annotations

from quart import Response

from corral.actors.deployments import EVENT_TYPES

from ..context import RequestContext
from ..routing import Router
from ..sse import event_stream
from .deployments import deployment_of

router = Router("deployment streams")


@router.get(
    "/deployments/{id}/events",
    summary="SSE: the deployment's events (deployment.publish.*, succeeded, failed, rollback)",
    scope="deployments:read",
    auth="ticket",
    content_type="text/event-stream",
)
async def events(ctx: RequestContext, id: str) -> Response:
    deployment = await deployment_of(ctx, id)
    return event_stream(ctx, resource_type="deployment", resource_id=deployment.id, types=EVENT_TYPES)
