"""The OpenAPI 3.1 document, generated from the route declarations.

Because the document and the URL map come from the same `Route` list, a route
cannot be served without being documented; a test also checks the URL map.
"""

from __future__ import annotations

from typing import Any

from corral import __version__
from corral.actors import idempotency
from corral.models import anchored, json_schema

from .params import param_description, param_schema
from .routing import Route

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "request_id"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "request_id": {"type": "string"},
                "details": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}

_AUTH_TEXT = {
    "public": "Public.",
    "public_auth": "Public; rate limited to 60 requests a minute per client IP.",
    "user": "Bearer API key or JWT access token.",
    "admin": "Admin key (`msk_a_`).",
    "ticket": "Bearer credential, or `?ticket=` from POST /auth/sse-ticket (single use).",
}


def _operation(route: Route) -> dict[str, Any]:
    declared = route.path_param_rules
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": param_schema(declared.get(name, ""))} for name in route.path_params
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "description": param_description(param), "schema": param_schema(param)}
        for name, param in route.query.items()
    ]
    if route.idempotent:
        parameters.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "Replays the stored reply of an earlier request with this key for 24 hours;"
                " the same key with another request is 422 IDEMPOTENCY_KEY_REUSED.",
                "schema": {"type": "string", "minLength": 1, "maxLength": idempotency.MAX_KEY_LENGTH, "pattern": anchored(idempotency.KEY)},
            }
        )
    description = _AUTH_TEXT[route.auth]
    if route.scope:
        description += f" Scope: `{route.scope}`."
    if route.action:
        description += f" Audited as `{route.action}`."
    operation: dict[str, Any] = {
        "operationId": route.endpoint.replace(" ", "_").replace("/", "_").replace("{", "").replace("}", ""),
        "summary": route.summary,
        "description": description,
        "tags": [route.tag],
        "parameters": parameters,
        "responses": {
            str(route.status): {
                "description": "Success",
                "content": {route.content_type: {"schema": {}}} if route.status != 204 else None,
            },
            "default": {
                "description": "Error envelope",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
    if operation["responses"][str(route.status)]["content"] is None:
        del operation["responses"][str(route.status)]["content"]
    if route.auth in ("public", "public_auth"):
        operation["security"] = []
    if route.request is not None:
        schema = json_schema(route.request)
        operation["requestBody"] = {"required": "required" in schema, "content": {"application/json": {"schema": schema}}}
    return operation


def build_document(routes: list[Route]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not route.internal:
            paths.setdefault(route.openapi_path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Corral API",
            "version": __version__,
            "description": "Multi-tenant compute platform: sandboxes, computers, deployments, "
            "databases, agent runs, credits, egress, webhooks and organisations. See docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": ERROR_SCHEMA},
        },
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
    }
