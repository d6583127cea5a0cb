"""`corral serve`: the platform and its HTTP API on Corral's own HTTP/1.1 server
(`asgi_server.py`, on trio and h11: it says why not hypercorn).

SIGTERM or SIGINT shuts down gracefully: the listener stops accepting, in-flight
requests finish, actors stop; instances are left running for the next start.
"""

from __future__ import annotations

import gc
import logging
import signal

import trio

from corral.actors.previews import run_preview
from corral.asgi_server import ServerConfig
from corral.asgi_server import serve as serve_http
from corral.config import Settings
from corral.node import Platform, check_edge, open_node, run_edge

from .app import MAX_BODY_BYTES, api_front, create_app
from .observe import observed

log = logging.getLogger("corral")


def server_config(host: str, port: int) -> ServerConfig:
    return ServerConfig(host, port, keep_alive_seconds=75, grace_seconds=10, max_body_bytes=MAX_BODY_BYTES)


async def _wait_for_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for received in signals:
            log.info("received %s; shutting down", signal.Signals(received).name)
            stop.set()
            return


async def run_api(platform: Platform, stop: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    # Imported here, not at the top: corral.operations.logs reads this package's observe.py.
    from corral.operations.logs import access_line

    settings = platform.settings
    app = create_app(platform)
    config = server_config(settings.host, settings.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_preview, platform, stop)  # the preview router, beside the API
        if access_line not in platform.request_observers:
            platform.request_observers.append(access_line)  # one `corral.access` line per request
        api = api_front(app)
        front = observed(api, platform.request_observers)  # a record of every request (observe.py)
        try:
            await serve_http(front, config, shutdown_trigger=stop.wait, task_status=task_status)
        finally:
            if api.forwarder is not None:
                with trio.CancelScope(shield=True):
                    await api.forwarder.aclose()


async def serve(settings: Settings, edge: bool = False) -> None:
    if edge:
        check_edge()
    stop = trio.Event()
    async with open_node(settings) as platform, trio.open_nursery() as nursery:
        nursery.start_soon(_wait_for_signal, stop)
        await nursery.start(run_api, platform, stop)
        # Everything made while starting lives as long as the node: out of the collector's
        # sight, a full collection no longer walks it (pauses of tens of ms, a p99 of
        # 45 ms at 16 connections before; issue 28).
        gc.freeze()
        log.info("Corral API listening on http://%s:%d", settings.host, settings.port)
        log.info("Corral preview router listening on http://%s:%d", settings.host, settings.preview_port)
        if edge:  # `corral serve --edge`: Caddy in front of the router, stopped with the node
            await nursery.start(run_edge, settings)
            log.info("Corral TLS edge listening on :%d (https) and :%d (http)", settings.edge_https_port, settings.edge_http_port)
        await stop.wait()
        nursery.cancel_scope.deadline = trio.current_time() + settings.shutdown_grace_seconds
