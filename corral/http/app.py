"""The Quart-Trio application: every router mounted behind the one pipeline."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from corral.actors.nodes.homes import Homes
from corral.errors import internal_error, not_found
from corral.node import Platform

from . import egress_tail
from .forward import Forwarder, forwarding_key
from .front import ApiFront
from .observe import current
from .openapi import build_document
from .pipeline import Pipeline, client_ip, error_response, http_error, new_request_id
from .ratelimit import RateLimiter, SharedRateLimiter
from .replies import json_response
from .request_window import request_window
from .routes import all_routers
from .routing import Route, Router

log = logging.getLogger("corral.http")

MAX_BODY_BYTES = 11 * 1024 * 1024
"""Room for a 10 MB upload plus its multipart framing; the files API enforces 10 MB itself."""

def default_routers() -> list[Router]:
    return all_routers()


def api_document(routes: Iterable[Route] | None = None) -> dict[str, Any]:
    """The OpenAPI document served at /api/v1/openapi.json: every route, and the WebSockets.

    Needs no server: `tools/gen_client.py` builds the Python client from it."""
    document = build_document(list(routes) if routes is not None else [r for rt in default_routers() for r in rt.routes])
    document["paths"] = dict(sorted({**document["paths"], **egress_tail.openapi_paths()}.items()))
    return document


def create_app(platform: Platform, routers: Iterable[Router] | None = None) -> QuartTrio:
    app = QuartTrio("corral")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["JSON_SORT_KEYS"] = False
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    pipeline = Pipeline(platform, node_rate_limiter(platform))
    request_window(platform.request_observers)  # the operator views' request rate (GET /admin/node)
    routes: list[Route] = [route for router in (routers or default_routers()) for route in router.routes]
    app.extensions["corral.routes"] = routes
    app.extensions["corral.platform"] = platform
    app.extensions["corral.pipeline"] = pipeline
    document = api_document(routes)
    app.extensions["corral.openapi"] = document

    for route in routes:
        app.add_url_rule(route.rule, endpoint=route.endpoint, view_func=pipeline.view(route), methods=[route.method])

    async def healthz() -> Response:
        named("/healthz")
        return json_response({"status": "ok"}, 200)

    async def openapi() -> Response:
        named("/api/v1/openapi.json")
        response = json_response(document, 200)
        response.headers["X-Request-Id"] = new_request_id()
        response.headers.update(pipeline.anonymous_decision(client_ip()).headers())
        return response

    app.add_url_rule("/healthz", endpoint="healthz", view_func=healthz, methods=["GET"])
    app.add_url_rule("/api/v1/openapi.json", endpoint="openapi", view_func=openapi, methods=["GET"])
    egress_tail.mount(app, platform, pipeline)

    @app.errorhandler(HTTPException)
    async def unrouted(error: HTTPException) -> Response:
        return _decorate(pipeline, error_response(http_error(error), new_request_id()))

    @app.errorhandler(Exception)
    async def unexpected(error: Exception) -> Response:
        request_id = new_request_id()
        log.exception("unhandled error outside a route (request %s)", request_id, exc_info=error)
        return _decorate(pipeline, error_response(internal_error(), request_id))

    return app


def node_rate_limiter(platform: Platform) -> RateLimiter:
    """On a store several nodes share, a `SharedRateLimiter`, whose limits hold across
    them (its batches sent for as long as the node runs); on SQLite the node-local
    `RateLimiter`, as it was."""
    if platform.rate_counts is None:
        return RateLimiter()
    limiter = SharedRateLimiter(platform.rate_counts)
    platform.nursery.start_soon(limiter.run)
    return limiter


def api_front(app: QuartTrio) -> ApiFront:
    """The ASGI application to serve: the routes straight through the pipeline, the
    rest through `app` (`front.py` says why)."""
    pipeline: Pipeline = app.extensions["corral.pipeline"]
    forwarder = node_forwarder(app.extensions["corral.platform"], pipeline)
    return ApiFront(routes_of(app), pipeline.run, app, MAX_BODY_BYTES, forwarder)  # type: ignore[arg-type]


def node_forwarder(platform: Platform, pipeline: Pipeline) -> Forwarder | None:
    """On a store several nodes share (PostgreSQL), what sends a resource's requests to
    the node it lives on (`forward.py`); on SQLite, nothing: every resource is here."""
    if platform.db.dialect != "postgresql":
        return None
    homes = Homes(platform.db, platform.settings.node_name, shared=True)
    regions = [name.strip() for name in platform.settings.regions.split(",") if name.strip()]
    return Forwarder(homes, forwarding_key(platform.jwt_secret), regions, pipeline.authenticator.authenticate)


def named(route: str) -> None:
    """The route template of a request Quart serves outside the pipeline, for its record."""
    record = current()
    if record is not None:
        record.route = route


def _decorate(pipeline: Pipeline, response: Response) -> Response:
    response.headers.setdefault("X-Request-Id", new_request_id())
    response.headers.update(pipeline.anonymous_decision(client_ip()).headers())
    return response


def routes_of(app: QuartTrio) -> list[Route]:
    routes: Any = app.extensions["corral.routes"]
    return list(routes)


__all__ = ["api_document", "api_front", "create_app", "not_found", "routes_of"]
