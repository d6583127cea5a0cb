"""The request pipeline every route runs through.

Order: request id, authentication (by the route's `auth`), rate limit, operator and
scope checks, the declared parameters (`check_params`), the handler, the error
envelope, the common headers, and finally the audit row of an authenticated mutation. Errors are always the JSON envelope; an
unexpected exception is logged with its request id and answered 500 INTERNAL_ERROR.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from quart import Response, has_websocket_context, request, websocket
from quart.wrappers.response import DataBody
from werkzeug.exceptions import HTTPException

from corral.actors import browser_tokens, idempotency
from corral.actors.runtime_errors import RUNTIME_ERRORS, answer_for, public_message
from corral.actors.tenancy import audit
from corral.errors import ApiError, CorralError, forbidden, internal_error, unauthorized
from corral.ids import new_ulid
from corral.node import Platform

from .auth import Authenticator
from .context import HttpRequest, RequestContext
from .observe import current
from .params import Param
from .principal import Principal
from .ratelimit import ANONYMOUS_RPM, EGRESS_RPM, PUBLIC_AUTH_RPM, RateDecision, RateLimiter
from .replies import Answer, JsonAnswer, Reply, json_answer, json_response
from .routing import Route

log = logging.getLogger("corral.http")


def new_request_id() -> str:
    """The id of the request being served (`observe.current`), or a new one."""
    record = current()
    return record.request_id if record is not None else f"req_{new_ulid()}"


def client_ip(incoming: Any = None) -> str | None:
    """The client's address, of `incoming` or else of Quart's current request (or
    WebSocket: an unknown WebSocket path's 404 is answered outside a request)."""
    if incoming is None:
        incoming = websocket if has_websocket_context() else request
    remote: str | None = incoming.remote_addr
    return remote


def error_response(error: ApiError, request_id: str) -> Response:
    headers = {**error.headers, "X-Request-Id": request_id}
    return json_response(error.body(request_id), error.status, headers)


def error_answer(error: ApiError, request_id: str) -> Answer:
    """`error_response` as the pipeline answers it (`replies.JsonAnswer`)."""
    return json_answer(error.body(request_id), error.status, {**error.headers, "X-Request-Id": request_id})


def as_api_error(error: Exception, request_id: str) -> ApiError:
    """Runtime and network errors get the answer of the actors' one table; others are 500s."""
    status, code = answer_for(error) if isinstance(error, RUNTIME_ERRORS) else (500, "INTERNAL_ERROR")
    if status >= 500:
        detail = getattr(error, "detail", "")
        log.error("request %s failed: %s: %s%s", request_id, type(error).__name__, error, f" ({detail})" if detail else "")
    # No internal address, host path or interface in what the caller reads (contract §18).
    message = public_message(error) if status < 500 or code != "INTERNAL_ERROR" else "internal server error"
    return ApiError(status, code, message)


HTTP_CODES = {400: "INVALID_BODY", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}


def http_error(error: HTTPException) -> ApiError:
    status = error.code or 500
    code = HTTP_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "INVALID_REQUEST")
    message = "no such route" if status == 404 else (error.description or error.name)
    return ApiError(status, code, message)


def rate_limited(decision: RateDecision) -> ApiError:
    return ApiError(429, "RATE_LIMITED", f"rate limit of {decision.limit} requests per minute exceeded; retry in {decision.retry_after} s")


class Pipeline:
    def __init__(self, platform: Platform, limiter: RateLimiter | None = None) -> None:
        self.platform = platform
        self.authenticator = Authenticator(platform)
        self.limiter = limiter if limiter is not None else RateLimiter()

    def anonymous_decision(self, ip: str | None) -> RateDecision:
        return self.limiter.hit(f"ip:{ip}", ANONYMOUS_RPM)

    def view(self, route: Route) -> Callable[..., Awaitable[Response]]:
        """The route as a Quart view (for what `front.ApiFront` leaves to Quart: multipart bodies)."""

        async def view(**params: Any) -> Response:
            answer = await self.run(route, params, request._get_current_object())  # type: ignore[attr-defined]
            return answer.as_quart() if isinstance(answer, JsonAnswer) else answer

        view.__name__ = route.endpoint
        return view

    async def run(self, route: Route, params: dict[str, Any], incoming: HttpRequest) -> Answer:
        ip = client_ip(incoming)
        ctx = RequestContext(self.platform, incoming, route, new_request_id(), ip)
        record = current()
        if record is not None:
            record.route = route.openapi_path
        decision: RateDecision | None = None
        try:
            decision = await self._admit(ctx, route, params)
            check_params(route, params, ctx.request.args)
            idempotency_key = ctx.request.headers.get("Idempotency-Key") if route.idempotent else None
            if idempotency_key is not None:
                response = await self._run_once(ctx, route, params, idempotency_key)
            else:
                response = await self._handle(ctx, route, params)
        except Exception as error:
            response = self._error_response(error, ctx, route)
        response.headers["X-Request-Id"] = ctx.request_id
        if decision is not None:
            response.headers.update(decision.headers())
        elif "X-RateLimit-Limit" not in response.headers:
            # A refusal before admission (401, 429) carries the bucket it hit, if any.
            response.headers.update(self.anonymous_decision(ip).headers())
        if route.is_mutation and ctx.principal_or_none is not None:
            after_answer = getattr(incoming, "after_answer", None)
            if after_answer is not None:  # the front's request: written once the answer is out
                after_answer.append(functools.partial(self._audit, ctx, route, response.status_code))
            else:
                await self._audit(ctx, route, response.status_code)
        return response

    async def _handle(self, ctx: RequestContext, route: Route, params: dict[str, Any]) -> Answer:
        try:
            result = await route.handler(ctx, **params)
        except Exception as error:
            return self._error_response(error, ctx, route)
        return _to_response(result, route)

    def _error_response(self, error: Exception, ctx: RequestContext, route: Route) -> Answer:
        """The error envelope of whatever the admission or the handler raised."""
        if isinstance(error, ApiError):
            return error_answer(error, ctx.request_id)
        if isinstance(error, (CorralError, *RUNTIME_ERRORS)):  # no actor answered for it: the one table
            return error_answer(as_api_error(error, ctx.request_id), ctx.request_id)
        if isinstance(error, HTTPException):  # raised while reading the body
            return error_answer(http_error(error), ctx.request_id)
        log.exception("unhandled error in %s (request %s)", route.endpoint, ctx.request_id, exc_info=error)
        return error_answer(internal_error(), ctx.request_id)

    async def _run_once(self, ctx: RequestContext, route: Route, params: dict[str, Any], key: str) -> Answer:
        """The handler under an Idempotency-Key (`corral.actors.idempotency`): a stored
        reply is answered again; a new key runs the handler and stores its reply."""
        tenant_id = ctx.principal.tenant_id or "operator"
        body = await ctx.request.get_data(cache=True)
        assert isinstance(body, bytes)
        stored = await idempotency.claim(
            self.platform.db,
            tenant_id,
            idempotency.check_key(key),
            idempotency.fingerprint(route.method, ctx.request.full_path.rstrip("?"), body),
        )
        if stored is not None:
            return JsonAnswer(stored.body.encode(), stored.status, {"Idempotent-Replayed": "true"})
        status, stored_body = 500, None
        try:
            response = await self._handle(ctx, route, params)
            status = response.status_code
            if isinstance(response, JsonAnswer):
                stored_body = response.body.decode() if status < 500 else None
            elif status < 500 and isinstance(response.response, DataBody):
                stored_body = (await response.get_data(as_text=True)) or ""
            return response
        finally:
            with trio.CancelScope(shield=True):
                await idempotency.settle(self.platform.db, tenant_id, key, status, stored_body)

    async def _admit(self, ctx: RequestContext, route: Route, params: dict[str, Any]) -> RateDecision | None:
        if route.auth == "public" and route.public_rpm is not None:
            decision = self.limiter.hit(f"{route.endpoint}:{ctx.client_ip}", route.public_rpm)
        elif route.auth == "public":
            decision = self.anonymous_decision(ctx.client_ip)
        elif route.auth == "public_auth":
            decision = self.limiter.hit(f"auth-ip:{ctx.client_ip}", PUBLIC_AUTH_RPM)
        else:
            principal = await self._principal(ctx, route, params)
            ctx.principal_or_none = principal
            record = current()
            if record is not None:
                record.tenant_id = principal.tenant_id
            bucket, limit = principal.rate_bucket, principal.rate_limit_rpm
            if route.path.startswith("/egress/"):  # the egress endpoints have a bucket of their own
                bucket, limit = f"{bucket}:egress", min(limit, EGRESS_RPM)
            decision = self.limiter.hit(bucket, limit)
            if decision.allowed:
                if principal.sandbox_id is not None:  # a browser token: its sandbox's routes only
                    browser_tokens.check_route(principal.sandbox_id, route.method, route.path, params)
                _authorize(principal, route)
        if not decision.allowed:
            raise ApiError(429, "RATE_LIMITED", rate_limited(decision).message, headers=decision.headers())
        return decision

    async def _principal(self, ctx: RequestContext, route: Route, params: dict[str, Any]) -> Principal:
        """Bearer credentials everywhere; streams also take `?ticket=` (browsers' EventSource
        cannot send headers), and say so when neither is there. A ticket must be of a
        purpose the route takes (`Route.ticket_purposes`)."""
        authorization = ctx.request.headers.get("Authorization")
        if route.auth == "ticket" and not authorization:
            ticket = ctx.request.args.get("ticket")
            if not ticket:
                raise unauthorized("missing sse ticket", code="UNAUTHORIZED")
            return await self.authenticator.from_ticket(ticket, ctx.client_ip, route.ticket_purposes(params))
        return await self.authenticator.authenticate(authorization, ctx.client_ip)

    async def _audit(self, ctx: RequestContext, route: Route, status: int) -> None:
        principal = ctx.principal
        tenant_id = ctx.audit.tenant_id or principal.tenant_id
        if tenant_id is None:
            return
        target = ctx.audit
        entry = audit.AuditEntry(
            tenant_id=tenant_id,
            actor_type=principal.kind,
            action=route.action or route.endpoint,
            method=route.method,
            path=ctx.request.path,
            status_code=status,
            outcome="success" if status < 400 else "failure",
            request_id=ctx.request_id,
            api_key_id=principal.api_key_id,
            actor_user_id=principal.user_id,
            workspace_id=target.workspace_id,
            project_id=target.project_id,
            external_workspace_id=target.external_workspace_id,
            external_user_id=target.external_user_id,
            external_project_id=target.external_project_id,
            resource_type=target.resource_type,
            resource_id=target.resource_id,
        )
        try:
            await audit.record(self.platform.db, entry)
        except Exception:
            log.exception("could not write the audit row of request %s", ctx.request_id)


def check_params(route: Route, params: dict[str, Any], args: Any) -> None:
    """The declared query parameters and the route's first path parameter (the resource it
    belongs to), before the handler; an absent or empty query parameter is left to the
    handler's default. An id below that resource is the handler's to check once it has
    found the resource (`RequestContext.checked_id`), so that another tenant's resource
    is a 404 whatever follows it."""
    rules = route.path_param_rules
    if route.path_params and route.path_params[0] in rules:
        first = route.path_params[0]
        rules[first].check(first, str(params[first]))
    for name, declared in route.query.items():
        raw = args.get(name)
        if isinstance(declared, Param) and raw:
            declared.check(name, raw)


def _authorize(principal: Principal, route: Route) -> None:
    if route.auth == "admin" and not principal.is_operator:
        raise forbidden("this endpoint needs an admin key")
    if route.scope is not None:
        principal.require_scope(route.scope)
    if route.tenant_wide and principal.workspace_id is not None:
        raise forbidden("this key is restricted to one workspace; the tenant's egress vault, policies and audit need a tenant-wide key")


def _to_response(result: Any, route: Route) -> Answer:
    if isinstance(result, Response):
        return result
    if isinstance(result, Reply):
        return json_answer(result.body, result.status, result.headers)
    return json_answer(result, route.status)
