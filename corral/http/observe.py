"""One record of every API request, for whoever watches the node (metrics, access log).

`observed(app, observers)` wraps the API's ASGI application: each HTTP request gets a
`RequestRecord` (its request id made here, so every log line written while it is
served can carry it: `current()`), filled in as the request goes (`route`, the
template the front or Quart matched; `tenant_id` once authenticated; the status and
the bytes of the answer) and handed to each observer when the answer is sent. An
observer is a plain function called on the event loop: it must be quick and must not
raise (one that does is logged and skipped).
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from corral.ids import new_ulid

log = logging.getLogger("corral.http")

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


Observer = Callable[[RequestRecord], None]

_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("corral_request", default=None)


def current() -> RequestRecord | None:
    """The request being served in this task (and the tasks it started), if any."""
    return _current.get()


def notify(observers: Iterable[Observer], record: RequestRecord) -> None:
    for observer in observers:
        try:
            observer(record)
        except Exception:
            log.exception("a request observer failed")


def observed(app: AsgiApp, observers: list[Observer]) -> AsgiApp:
    """`app` with a `RequestRecord` per HTTP request, handed to `observers` when answered."""

    async def wrapped(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        record = RequestRecord(scope["method"], scope["path"])
        scope["corral.request"] = record
        token = _current.set(record)

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = int(message["status"])
            elif message["type"] == "http.response.body":
                record.response_bytes += len(message.get("body", b""))
                if not message.get("more_body", False):
                    record.duration_seconds = time.perf_counter() - record.started
                    notify(observers, record)
            await send(message)

        try:
            await app(scope, receive, counting_send)
        finally:
            _current.reset(token)

    return wrapped
