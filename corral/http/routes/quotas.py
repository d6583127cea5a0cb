"""Per-end-user quotas (spec "Quotas"): limits for one `external_user_id` and its usage."""

from __future__ import annotations

from typing import Any

from corral.actors import billing
from corral.errors import ApiError, forbidden, validation_error

from ..context import RequestContext
from ..replies import Reply, data, no_content
from ..routing import Router

router = Router("quotas")

MAX_EXTERNAL_ID = 255
LIMIT_SCHEMA = {"type": ["integer", "null"], "minimum": 0}


def _quota_not_found() -> ApiError:
    return ApiError(404, "not_found", "quota not found")


def _external_id(value: str) -> str:
    if not value.strip() or len(value) > MAX_EXTERNAL_ID:
        raise validation_error({"external_user_id": f"must be 1 to {MAX_EXTERNAL_ID} characters"})
    return value


def _limits(body: dict[str, Any]) -> dict[str, int | None]:
    """Each limit: omitted or null (uncapped), or a non-negative integer; else 422."""
    errors: dict[str, str] = {}
    limits: dict[str, int | None] = {}
    for name in billing.LIMITS:
        value = body.get(name)
        if value is None:
            limits[name] = None
        elif isinstance(value, bool) or not isinstance(value, int):
            errors[name] = "must be an integer"
        elif value < 0:
            errors[name] = "must be at least 0"
        else:
            limits[name] = value
    if errors:
        raise validation_error(errors)
    return limits


def _require_admin(ctx: RequestContext) -> None:
    if not ctx.principal.is_tenant_admin:
        raise forbidden("setting end-user quotas needs a tenant owner or admin")


@router.get("/quotas/external/{external_user_id}", summary="An end user's quota: limits and live usage", scope="org:read")
async def get_quota(ctx: RequestContext, external_user_id: str) -> Reply:
    row = await billing.get_quota(ctx.db, ctx.tenant_id, _external_id(external_user_id))
    if row is None:
        raise _quota_not_found()
    return data(await billing.quota_public(ctx.db, ctx.platform.billing_hooks.inventories().values(), row))


@router.put(
    "/quotas/external/{external_user_id}",
    summary="Replace an end user's quota (omitted limits are uncapped; tenant owner or admin)",
    scope="org:write",
    action="quotas.put",
    request={"type": "object", "properties": {name: LIMIT_SCHEMA for name in billing.LIMITS}},
)
async def put_quota(ctx: RequestContext, external_user_id: str) -> Reply:
    external_id = _external_id(external_user_id)
    _require_admin(ctx)
    limits = _limits(await ctx.json())
    ctx.audit.update(resource_type="quota", resource_id=external_id, external_user_id=external_id)
    row = await billing.put_quota(ctx.db, ctx.tenant_id, external_id, limits)
    return data(await billing.quota_public(ctx.db, ctx.platform.billing_hooks.inventories().values(), row))


@router.delete(
    "/quotas/external/{external_user_id}",
    summary="Remove an end user's quota (tenant owner or admin)",
    scope="org:write",
    action="quotas.delete",
)
async def delete_quota(ctx: RequestContext, external_user_id: str) -> Reply:
    external_id = _external_id(external_user_id)
    _require_admin(ctx)
    ctx.audit.update(resource_type="quota", resource_id=external_id, external_user_id=external_id)
    if not await billing.delete_quota(ctx.db, ctx.tenant_id, external_id):
        raise _quota_not_found()
    return no_content()
