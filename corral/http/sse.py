"""Server-sent event streams: framing, heartbeats, and resumable resource event streams.

Every stream is a Quart streaming response whose body is an async generator of
frames. A stream never times out on its own: its source yields a comment heartbeat
whenever `sse_heartbeat_seconds` pass without a frame, so proxies keep it open and a
client that has left is noticed at the latest then (the write fails, the server
cancels the generator, and its `with` blocks close the bus subscription).

`event_stream` serves one resource's bus events. It subscribes *before* replaying
the event log after `Last-Event-ID`, and drops live events at or below the last id
it replayed, so nothing published in between is lost or sent twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import trio
from quart import Response

from corral.actors.bus import SubscriberLagged
from corral.storage import Event

from .context import RequestContext

log = logging.getLogger("corral.http.sse")

HEARTBEAT = b": heartbeat\n\n"
CONNECTED = b": connected\n\n"
"""The first chunk of every stream, sent once it is subscribed: a client that has read it
misses nothing published afterwards."""
REPLAY_PAGE = 500

EventData = Callable[[Event], dict[str, Any]]
T = TypeVar("T")


def frame(event_type: str | None, data: Any, event_id: str | None = None) -> bytes:
    """One SSE frame: `id:`, `event:` and a single-line JSON `data:`."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event_type is not None:
        lines.append(f"event: {event_type}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), default=str))
    return ("\n".join(lines) + "\n\n").encode()


def sse_response(frames: AsyncIterator[bytes]) -> Response:
    """A `text/event-stream` response whose body is `frames` (heartbeats included)."""

    response = Response(frames, status=200, mimetype="text/event-stream")
    response.timeout = None  # quart: no body timeout for streams
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    # Browsers' EventSource authenticates with a ticket in the URL, not cookies, so any
    # origin may read a stream its ticket opens.
    response.headers["Access-Control-Allow-Origin"] = "*"
    return response


async def receive_or_heartbeat(receive: Callable[[], Awaitable[T]], interval: float) -> T | None:
    """`await receive()`, or None when `interval` passes first (time for a heartbeat).

    `receive` must be safe to cancel without losing an item, as a trio memory
    channel's or a bus subscription's is. The caller yields outside this call, never
    inside a cancel scope."""
    with trio.move_on_after(interval):
        return await receive()
    return None


def last_event_id(ctx: RequestContext) -> str | None:
    """`Last-Event-ID` (browsers resend it on reconnect), or `?last_event_id=` for clients that cannot."""
    value = ctx.request.headers.get("Last-Event-ID") or ctx.request.args.get("last_event_id")
    return value.strip() or None if value else None


def event_stream(
    ctx: RequestContext,
    *,
    resource_type: str,
    resource_id: str,
    types: Iterable[str] | None = None,
    data: EventData | None = None,
    from_start: bool = False,
    final_types: Iterable[str] = (),
    ends_when: Callable[[Event], bool] | None = None,
    live_for: float | None = None,
) -> Response:
    """The SSE stream of one resource's events: replay after `Last-Event-ID`, then live.

    Frames are `id: <event ULID>`, `event: <type>`, `data: <event data as JSON>` (or
    `data(event)`). Only events of `types` (exact, or `prefix.*`) when given. Without
    `Last-Event-ID` a stream starts live (the event log answers for what came
    before), or with every retained event when `from_start`.

    Streams of something that ends: the stream closes right after sending an event
    of `final_types`; without a frame when a live event of the tenant (of any
    resource) passes `ends_when` (the resource's owner was deleted); and after
    `live_for` seconds of live events when given (a resource that had already ended
    when the stream was opened: its final event may still be on its way)."""
    platform = ctx.platform
    wanted = list(types) if types is not None else None
    final = frozenset(final_types)
    render = data or (lambda event: event.data)
    tenant_id = ctx.tenant_id
    heartbeat = platform.settings.sse_heartbeat_seconds

    def matches(event: Event) -> bool:
        if event.tenant_id != tenant_id:
            return False
        if wanted is None:
            return True
        return any(event.type.startswith(t[:-1]) if t.endswith(".*") else event.type == t for t in wanted)

    def mine(event: Event) -> bool:
        return event.resource_type == resource_type and event.resource_id == resource_id and matches(event)

    def ending(event: Event) -> bool:
        return ends_when is not None and event.tenant_id == tenant_id and not mine(event) and ends_when(event)

    resume_after = last_event_id(ctx)  # read now: the body runs outside the request context

    async def frames() -> AsyncIterator[bytes]:
        after = resume_after if resume_after is not None else ("" if from_start else None)
        greeted = False
        deadline = None if live_for is None else trio.current_time() + live_for
        while True:
            subscription = platform.bus.subscribe(lambda event: mine(event) or ending(event))
            with subscription:
                if not greeted:
                    greeted = True
                    yield CONNECTED
                while after is not None:  # replay everything retained after `after`, a page at a time
                    replayed = await platform.events.list(resource_type, resource_id, after=after, limit=REPLAY_PAGE)
                    for old in replayed:
                        after = old.id
                        if matches(old):
                            yield frame(old.type, render(old), old.id)
                            if old.type in final:
                                return
                    if len(replayed) < REPLAY_PAGE:
                        break
                while True:
                    wait = heartbeat if deadline is None else min(heartbeat, deadline - trio.current_time())
                    if wait <= 0:
                        return
                    try:
                        event = await receive_or_heartbeat(subscription.receive, wait)
                    except SubscriberLagged:
                        log.info("an SSE client of %s %s lagged; replaying from the log", resource_type, resource_id)
                        break
                    except trio.EndOfChannel:
                        return  # the bus closed: the server is shutting down
                    if event is None:
                        if deadline is None or trio.current_time() < deadline:
                            yield HEARTBEAT
                    elif not mine(event):
                        return  # `ends_when`: what the stream is about is gone
                    elif after is None or event.id > after:  # not already sent by the replay
                        after = event.id
                        yield frame(event.type, render(event), event.id)
                        if event.type in final:
                            return

    return sse_response(frames())
