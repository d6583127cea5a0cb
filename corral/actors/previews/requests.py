"""The bodies of the preview routes, declared once for validation and the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any

from corral.models import Rule, model
from corral.net.network import DEFAULT_AGENT_PORT

from .exposure import parse_port

PREVIEW_TOKEN_DEFAULT_TTL = 3600
PREVIEW_TOKEN_MAX_TTL = 86400

# `Any` checked by `parse_port`: a bad port is the section's own `422 INVALID_PORT`.
Port = Annotated[
    Any, Rule(parse=parse_port, schema={"type": "integer", "minimum": 1, "maximum": 65535, "not": {"const": DEFAULT_AGENT_PORT}})
]


@model
class ExposePort:
    """Without a port, the template's default preview port (the default template has none)."""

    port: Port = None


@model
class PreviewTokenRequest:
    expires_in: Annotated[
        int | None,
        Rule(minimum=1, maximum=PREVIEW_TOKEN_MAX_TTL, message=f"must be an integer number of seconds from 1 to {PREVIEW_TOKEN_MAX_TTL}",
             schema={"default": PREVIEW_TOKEN_DEFAULT_TTL}),
    ] = None


@model
class ShareRequest:
    """A share never expires unless `expires_in` is given; `port` defaults to the latest exposed one."""

    expires_in: Annotated[int | None, Rule(minimum=1, message="must be an integer number of seconds of at least 1")] = None
    port: Port = None
