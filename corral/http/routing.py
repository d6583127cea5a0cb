"""Routes declared once with everything the pipeline and the OpenAPI document need.

A handler is `async def handler(ctx: RequestContext, **path_params)` and returns a
`Reply` (or a quart Response for streams and downloads). The route's declaration
says who may call it (`auth`), which scope it needs, and the audit action name of
a mutation; `pipeline.py` enforces all of it, so no handler repeats those checks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from corral.models import is_model

from .params import RESOURCE_IDS, Param

Auth = Literal["public", "public_auth", "user", "admin", "ticket"]
Handler = Callable[..., Awaitable[Any]]

_PARAM = re.compile(r"\{([a-z_]+)(?::([a-z]+))?\}")


@dataclass
class Route:
    method: str
    path: str
    """OpenAPI form, relative to the mount point: `/api-keys/{id}`."""
    handler: Handler
    summary: str
    tag: str
    auth: Auth = "user"
    scope: str | None = None
    action: str | None = None
    """Audit action name such as `api_keys.create`; mutations record it."""
    request: type | None = None
    """The request model (`corral.models.model`) the handler reads with `ctx.body`;
    the OpenAPI document describes the body from the same class."""
    status: int = 200
    query: dict[str, Param | str] = field(default_factory=dict)
    """Query parameter name -> a `Param` the pipeline checks, or only a description."""
    params: dict[str, Param] = field(default_factory=dict)
    """Path parameters the pipeline checks, beyond the resource ids of `RESOURCE_IDS`."""
    prefix: str = "/api/v1"
    content_type: str = "application/json"
    idempotent: bool = False
    """POST routes that honour the `Idempotency-Key` header (contract §12)."""
    tenant_wide: bool = False
    """Manages what belongs to the whole tenant (the egress vault, its policies and audit):
    a key restricted to one workspace is refused (403)."""
    ticket_purpose: str | None = None
    """A `ticket` route that also takes a narrower ticket than the general `sse` one:
    its purpose, with path parameters in braces (`cua:{session_id}`)."""
    public_rpm: int | None = None
    """A `public` route with a per-IP bucket of its own and this limit a minute, instead
    of the shared anonymous one (`/tls/ask`: Caddy asks from one address)."""
    internal: bool = False
    """Between the nodes of a cluster, not for users: left out of the OpenAPI document
    (so of the generated client); docs/api.md still describes it."""

    @property
    def full_path(self) -> str:
        if self.path == "/":
            return self.prefix or "/"  # a router mounted at the root (prefix "") may serve `/` itself
        return f"{self.prefix}{self.path}"

    @property
    def rule(self) -> str:
        """The path in werkzeug rule syntax: `{id}` -> `<id>`, `{path:path}` -> `<path:path>`."""
        return _PARAM.sub(lambda m: f"<{m[2]}:{m[1]}>" if m[2] else f"<{m[1]}>", self.full_path)

    @property
    def openapi_path(self) -> str:
        return _PARAM.sub(lambda m: "{" + m[1] + "}", self.full_path)

    @property
    def path_params(self) -> list[str]:
        return [m[1] for m in _PARAM.finditer(self.path)]

    @functools.cached_property
    def path_param_rules(self) -> dict[str, Param]:
        """Each declared path parameter: its own declaration, or the id of the collection
        it follows (`/computers/{id}`)."""
        found: dict[str, Param] = {}
        for match in _PARAM.finditer(self.path):
            name = match[1]
            collection = self.path[: match.start()].rstrip("/").rsplit("/", 1)[-1]
            declared = self.params.get(name) or RESOURCE_IDS.get(f"{collection}/{{{name}}}") or RESOURCE_IDS.get(collection)
            if declared is not None:
                found[name] = declared
        return found

    @property
    def endpoint(self) -> str:
        return f"{self.method.lower()} {self.full_path}"

    def ticket_purposes(self, params: dict[str, Any]) -> tuple[str, ...]:
        """The purposes of the tickets this route takes: the general `sse` one, and its own."""
        if self.ticket_purpose is None:
            return ("sse",)
        return ("sse", self.ticket_purpose.format(**params))

    @property
    def is_mutation(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


class Router:
    """A group of routes under one OpenAPI tag."""

    def __init__(self, tag: str, prefix: str = "/api/v1", *, tenant_wide: bool = False) -> None:
        self.tag = tag
        self.prefix = prefix
        self.tenant_wide = tenant_wide
        self.routes: list[Route] = []

    def route(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        auth: Auth = "user",
        scope: str | None = None,
        action: str | None = None,
        request: type | None = None,
        status: int = 200,
        query: dict[str, Param | str] | None = None,
        params: dict[str, Param] | None = None,
        content_type: str = "application/json",
        idempotent: bool = False,
        ticket_purpose: str | None = None,
        public_rpm: int | None = None,
        internal: bool = False,
    ) -> Callable[[Handler], Handler]:
        if request is not None and not is_model(request):
            raise TypeError(f"{method} {path}: request must be a corral.models.model class, not {request!r}")

        def register(handler: Handler) -> Handler:
            self.routes.append(
                Route(
                    method=method,
                    path=path,
                    handler=handler,
                    summary=summary,
                    tag=self.tag,
                    auth=auth,
                    scope=scope,
                    action=action,
                    request=request,
                    status=status,
                    query=query or {},
                    params=params or {},
                    prefix=self.prefix,
                    content_type=content_type,
                    idempotent=idempotent,
                    tenant_wide=self.tenant_wide,
                    ticket_purpose=ticket_purpose,
                    public_rpm=public_rpm,
                    internal=internal,
                )
            )
            return handler

        return register

    def get(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, **kwargs)
