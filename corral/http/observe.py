"""One record of every API request, for whoever watches the node (metrics, access log).

`observed(app, observers)` wraps the API's ASGI application: each HTTP request gets a
`RequestRecord` (its request id made here, so every log line written while it is
served can carry it: `current()`), filled in as the request goes (`route`, the
template the front or Quart matched; `tenant_id` once authenticated; the status and
the bytes of the answer) and handed to the node's observers once the answer's last
bytes are sent (the duration is taken before: the time to answer); they see it in a
batch a moment later (`corral.request_observers`).

When a tracer provider is installed (`corral.operations.tracing`, only when spans are
exported) each request also gets a server span, current for the whole handling, so the
spans of the actors, agent calls and store transactions it causes are its children.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from corral import current_request
from corral.ids import new_ulid
from corral.request_observers import RequestObservers
from corral.tracer import recording_tracer

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

UNMATCHED = "unmatched"
"""The route of a request no route took (a 404): one label, whatever the path was."""


@dataclass
class RequestRecord:
    method: str
    path: str
    request_id: str = field(default_factory=lambda: f"req_{new_ulid()}")
    route: str = UNMATCHED
    """The route's template (`/api/v1/sandboxes/{id}`), never the path itself."""
    tenant_id: str | None = None
    status: int = 0
    response_bytes: int = 0
    started: float = field(default_factory=time.perf_counter)
    duration_seconds: float = 0.0
    kind: str = "api"



def current() -> RequestRecord | None:
    """The request being served in this task (the tasks it started, and the actors'
    handlers of the messages it sent: `corral.current_request`), if any."""
    record = current_request.current()
    return record if isinstance(record, RequestRecord) else None


def _start_span(record: RequestRecord) -> trace.Span | None:
    tracer = recording_tracer(__name__)
    if tracer is None:
        return None
    return tracer.start_span(
        f"{record.method} {record.route}",
        kind=trace.SpanKind.SERVER,
        attributes={"http.method": record.method, "corral.request_id": record.request_id},
    )


def _end_span(span: trace.Span, record: RequestRecord) -> None:
    """Name the span by route template (known only now) and end it."""
    span.update_name(f"{record.method} {record.route}")
    span.set_attribute("http.route", record.route)
    span.set_attribute("http.status_code", record.status)
    if record.tenant_id:
        span.set_attribute("corral.tenant_id", record.tenant_id)
    if record.status >= 500 or record.status == 0:
        span.set_status(trace.StatusCode.ERROR)
    span.end()


def observed(app: AsgiApp, observers: RequestObservers) -> AsgiApp:
    """`app` with a `RequestRecord` per HTTP request, handed to `observers` when answered."""

    async def wrapped(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        record = RequestRecord(scope["method"], scope["path"])
        scope["corral.request"] = record
        token = current_request.enter(record)

        span = _start_span(record)
        span_token = otel_context.attach(trace.set_span_in_context(span)) if span is not None else None

        async def counting_send(message: Message) -> None:
            nonlocal span
            if message["type"] == "http.response.start":
                record.status = int(message["status"])
            elif message["type"] == "http.response.body":
                record.response_bytes += len(message.get("body", b""))
                if not message.get("more_body", False):
                    record.duration_seconds = time.perf_counter() - record.started
                    if span is not None:  # ended with the answer (spans are exported only when traced)
                        _end_span(span, record)
                        span = None
                    try:
                        await send(message)
                    finally:  # the client has its answer; the observers get it in a batch
                        observers.record(record)
                    return
            await send(message)

        try:
            await app(scope, receive, counting_send)
        finally:
            if span_token is not None:
                otel_context.detach(span_token)
            if span is not None:  # no complete answer: an error, or the client went away
                _end_span(span, record)
            current_request.leave(token)

    return wrapped
