"""What a handler receives: the platform, the caller, the request, and body helpers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, Union

from quart import Request
from werkzeug.exceptions import HTTPException

from corral.actors.tenancy import tenant_resolution_failed
from corral.errors import ApiError, invalid_body, invalid_id, unauthorized
from corral.ids import is_uuid
from corral.models import parse
from corral.node import Platform

from .params import Integer
from .principal import Principal
from .routing import Route

if TYPE_CHECKING:
    from .front import ApiRequest

M = TypeVar("M")


@dataclass
class AuditTarget:
    """What a mutation touched, filled in by the handler for the audit row."""

    tenant_id: str | None = None
    workspace_id: str | None = None
    project_id: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    external_workspace_id: str | None = None
    external_user_id: str | None = None
    external_project_id: str | None = None

    def update(self, **fields: Any) -> None:
        for name, value in fields.items():
            if hasattr(self, name) and value is not None:
                setattr(self, name, value)


HttpRequest = Union[Request, "ApiRequest"]
"""Quart's request (multipart bodies) or the front's (`front.ApiRequest`): the same
attributes, as far as handlers read them."""


@dataclass
class RequestContext:
    platform: Platform
    request: HttpRequest
    route: Route
    request_id: str
    client_ip: str | None
    principal_or_none: Principal | None = None
    audit: AuditTarget = field(default_factory=AuditTarget)
    _body: Any = None
    _body_read: bool = False

    @property
    def principal(self) -> Principal:
        if self.principal_or_none is None:
            raise unauthorized()
        return self.principal_or_none

    @property
    def tenant_id(self) -> str:
        """The caller's tenant, or 422 TENANT_RESOLUTION_FAILED (e.g. the bootstrap operator key)."""
        tenant_id = self.principal.tenant_id
        if tenant_id is None:
            raise tenant_resolution_failed()
        return tenant_id

    @property
    def db(self) -> Any:
        return self.platform.db

    async def json(self) -> dict[str, Any]:
        """The body as a JSON object; an empty body is `{}`; anything else is INVALID_BODY."""
        if not self._body_read:
            try:
                raw = await self.request.get_data(cache=True, as_text=False)
            except HTTPException as exc:  # too large, or the client stalled
                raise _unreadable_body(exc) from exc
            self._body_read = True
            if not raw or not raw.strip():
                self._body = {}
            else:
                try:
                    self._body = json.loads(raw)
                except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                    raise invalid_body("request body is not valid JSON") from exc
        if not isinstance(self._body, dict):
            raise invalid_body("request body must be a JSON object")
        return self._body

    async def body(self, model: type[M]) -> M:
        """The body validated into the route's declared request model (`corral.models`)."""
        if model is not self.route.request:
            raise TypeError(f"{self.route.endpoint} declares {self.route.request!r}, not {model.__name__}")
        return parse(model, await self.json())

    def checked_id(self, name: str, value: str) -> str:
        """A path parameter below the route's resource, by its declaration (`corral.http.params`)."""
        self.route.path_param_rules[name].check(name, value)
        return value

    def query(self, name: str, default: str | None = None) -> str | None:
        return self.request.args.get(name, default)

    def query_int(self, name: str) -> int:
        """An integer query parameter, by the route's `Integer` declaration (its default and
        bounds; the pipeline has refused a bad value already)."""
        declared = self.route.query.get(name)
        if not isinstance(declared, Integer):
            raise TypeError(f"{self.route.endpoint}: query parameter {name} is not declared as an Integer")
        return declared.value(name, self.request.args.get(name))


def _unreadable_body(error: HTTPException) -> ApiError:
    if error.code == 413:
        return ApiError(413, "PAYLOAD_TOO_LARGE", "request body is too large")
    return invalid_body(f"request body could not be read: {error.description or error.name}")


def require_uuid(value: str, noun: str = "id") -> str:
    if not is_uuid(value):
        raise invalid_id(noun)
    return value.lower()
