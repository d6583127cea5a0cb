"""A computer's logs (contract §10): its desktop services' and app installs' output.

`GET /computers/{id}/logs?tail=200` answers the last lines; `/logs/stream` is their
SSE stream (bearer or `?ticket=`). Both need `running` (`409 COMPUTER_NOT_RUNNING`).
The work is `corral.actors.computers.logs`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
from quart import Response

from corral.actors import computers
from corral.actors.computers import logs
from corral.actors.runtime_errors import RUNTIME_ERRORS
from corral.errors import ApiError

from ..context import RequestContext
from ..params import Integer, Param
from ..replies import Reply, data
from ..routing import Router
from ..sse import CONNECTED, HEARTBEAT, frame, last_event_id, receive_or_heartbeat, sse_response
from .computers import READ, computer_row

router = Router("computers")

TAIL_QUERY: dict[str, Param | str] = {"tail": Integer("how many of the last lines", logs.DEFAULT_TAIL, minimum=0, maximum=logs.MAX_TAIL)}


def _tail(ctx: RequestContext) -> int:
    return ctx.query_int("tail")


@router.get(
    "/computers/{id}/logs",
    summary="The last lines of the computer's logs: {lines: [{line, ts, source}]}, oldest first",
    scope=READ,
    query=TAIL_QUERY,
)
async def recent(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return data({"lines": await logs.recent_lines(ctx.platform, row, _tail(ctx))})


@router.get(
    "/computers/{id}/logs/stream",
    summary="SSE: `log` events {line, ts, source}: the last `tail` lines (or those after Last-Event-ID), then live",
    scope=READ,
    auth="ticket",
    query=TAIL_QUERY,
    content_type="text/event-stream",
)
async def stream(ctx: RequestContext, id: str) -> Response:
    row = await computer_row(ctx, id)
    if row.status != "running":
        raise computers.not_running()
    tail = _tail(ctx)
    cursor = logs.parse_cursor(last_event_id(ctx))
    platform = ctx.platform
    heartbeat = platform.settings.sse_heartbeat_seconds

    async def frames() -> AsyncIterator[bytes]:
        # Started by the body, so that the body's end (the client left) always closes it.
        try:
            follower = await logs.follow(platform, platform.nursery, row, tail=tail, cursor=cursor)
        except ApiError:
            return  # it stopped since the check above
        except RUNTIME_ERRORS:
            return  # its agent went away meanwhile
        try:
            yield CONNECTED
            for line, position in follower.first:
                yield frame("log", line.public(), position)
            while True:
                try:
                    item = await receive_or_heartbeat(follower.receive.receive, heartbeat)
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return  # the computer stopped, paused or went away
                if item is None:
                    yield HEARTBEAT
                else:
                    line, position = item
                    yield frame("log", line.public(), position)
        finally:
            follower.close()

    return sse_response(frames())
