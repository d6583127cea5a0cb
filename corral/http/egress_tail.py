"""The egress audit live tail: WebSockets that push each audit row as it is recorded.

`/api/v1/egress/audit/resource/{resource_id}` (a sandbox or computer of the caller's
tenant) and `/api/v1/egress/audit/tenant/{tenant_id}` (tenant owners and admins only)
take `?token=` (a JWT or an API key of the tenant; browsers cannot set headers on a
WebSocket) and the subprotocol `svc-egress-audit-v1`, and send `{type: "audit_event",
data}` text frames for every `egress.audit` event on the bus (contract §11). A refusal
before the upgrade is an HTTP answer with the usual error envelope. These streams do
not count against the REST quota.
"""

from __future__ import annotations

import json
import logging

import trio
from quart import Response, websocket
from quart_trio import QuartTrio

from corral.actors import egress
from corral.errors import ApiError, forbidden, not_found, unauthorized
from corral.node import Platform

from .pipeline import Pipeline, error_response, new_request_id
from .principal import Principal

log = logging.getLogger("corral.http.egress_tail")

SUBPROTOCOL = "svc-egress-audit-v1"
PREFIX = "/api/v1/egress/audit"


async def _principal(pipeline: Pipeline) -> Principal:
    token = websocket.args.get("token")
    if not token:
        raise unauthorized("missing token")
    principal = await pipeline.authenticator.authenticate(f"Bearer {token}", websocket.remote_addr)
    principal.require_scope("egress:read")
    if principal.workspace_id is not None:
        raise forbidden("this key is restricted to one workspace; the egress audit needs a tenant-wide key")
    if principal.tenant_id is None:
        raise forbidden("the live tail needs a tenant's credentials")
    return principal


async def _stream(platform: Platform, tenant_id: str, resource_id: str | None) -> None:
    """Accept, then forward matching events until the client goes away."""
    await websocket.accept(subprotocol=SUBPROTOCOL)
    subscription = platform.bus.subscribe(tenant_id=tenant_id, resource_id=resource_id, types=[egress.EVENT_TYPE])
    with subscription:
        async with trio.open_nursery() as nursery:

            async def watch_close() -> None:
                try:
                    while True:
                        await websocket.receive()
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch_close)
            async for event in subscription:
                await websocket.send(json.dumps({"type": "audit_event", "data": event.data}))
            nursery.cancel_scope.cancel()


def mount(app: QuartTrio, platform: Platform, pipeline: Pipeline) -> None:
    """Add the two tail WebSockets to `app`."""

    async def refuse(error: ApiError) -> Response:
        response = error_response(error, new_request_id())
        return response

    async def check_protocol() -> None:
        if SUBPROTOCOL not in websocket.requested_subprotocols:
            raise ApiError(400, "INVALID_PARAM", f"the subprotocol {SUBPROTOCOL} is required")

    async def resource_tail(resource_id: str) -> Response | None:
        try:
            await check_protocol()
            principal = await _principal(pipeline)
            tenant_id = principal.tenant_id or ""
            found = [
                await egress.find_resource(platform.db, tenant_id, kind, resource_id) for kind in ("sandbox", "computer")
            ]
            if not any(found):
                raise not_found("resource not found")
        except ApiError as error:
            return await refuse(error)
        await _stream(platform, tenant_id, resource_id)
        return None

    async def tenant_tail(tenant_id: str) -> Response | None:
        try:
            await check_protocol()
            principal = await _principal(pipeline)
            if principal.tenant_id != tenant_id:
                raise not_found("tenant not found")
            if not principal.is_tenant_admin:
                raise forbidden("the tenant's live tail needs a tenant owner or admin")
        except ApiError as error:
            return await refuse(error)
        await _stream(platform, tenant_id, None)
        return None

    app.add_websocket(f"{PREFIX}/resource/<resource_id>", "egress_tail_resource", resource_tail)
    app.add_websocket(f"{PREFIX}/tenant/<tenant_id>", "egress_tail_tenant", tenant_tail)


def openapi_paths() -> dict[str, dict[str, object]]:
    """The two WebSockets in the OpenAPI document (an upgrading GET each)."""

    def operation(name: str, summary: str) -> dict[str, object]:
        return {
            "get": {
                "operationId": f"egress_tail_{name}",
                "tags": ["egress"],
                "summary": summary,
                "description": f"WebSocket (subprotocol `{SUBPROTOCOL}`); `?token=` is a JWT or API key "
                "(scope egress:read). Frames: `{type: \"audit_event\", data: <audit event>}`.",
                "security": [],
                "parameters": [
                    {"name": name, "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "token", "in": "query", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {
                    "101": {"description": "switching to the WebSocket"},
                    "default": {
                        "description": "refused before the upgrade",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                },
            }
        }

    return {
        f"{PREFIX}/resource/{{resource_id}}": operation("resource_id", "Live tail of one sandbox's or computer's audit rows"),
        f"{PREFIX}/tenant/{{tenant_id}}": operation("tenant_id", "Live tail of the tenant's audit rows (owner or admin)"),
    }
