"""The operator listener: `GET /metrics` on `CORRAL_METRICS_PORT` (contract §19).

A port of its own, without authentication (operators bind it to a private interface),
served by the API's own HTTP/1.1 server (`corral.asgi_server`). The exposition is prometheus_client's own
ASGI app (content negotiation, OpenMetrics, gzip); before it runs, the store-derived
figures are refreshed (`NodeMetrics.refresh`), which needs the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from prometheus_client import make_asgi_app

from corral.asgi_server import ServerConfig, serve

from .metrics import NodeMetrics

log = logging.getLogger("corral.metrics")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def metrics_app(metrics: NodeMetrics) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """`GET /metrics` (also HEAD) from `metrics`; 404 for any other path, 405 for other methods."""
    exposition = make_asgi_app(metrics.registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _plain(send, 404, b"not found: the metrics are at /metrics\n")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, b"method not allowed\n")
            return
        metrics.platform.request_observers.drain()  # every request answered until now is counted
        await metrics.refresh()
        await exposition(scope, receive, send)

    return app


async def _plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def run_metrics_listener(
    metrics: NodeMetrics, host: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve `metrics` at `http://host:port/metrics` until cancelled; started once listening."""
    await serve(metrics_app(metrics), ServerConfig(host, port, grace_seconds=1), shutdown_trigger=trio.sleep_forever,
                task_status=task_status)
