"""Per-end-user quotas (spec "Quotas"): limits for one `external_user_id` and its usage."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from corral.actors import billing
from corral.errors import ApiError, forbidden, validation_error
from corral.models import Rule, model

from ..context import RequestContext
from ..replies import Reply, data, no_content
from ..routing import Router

router = Router("quotas")

MAX_EXTERNAL_ID = 255
Limit = Annotated[int | None, Rule(minimum=0, description="omitted or null: uncapped")]


@model
class Quota:
    """The whole quota: a limit left out is uncapped."""

    max_sandboxes: Limit = None
    max_concurrent: Limit = None
    max_storage_gb: Limit = None
    max_credit_cents: Limit = None


assert tuple(field.name for field in dataclasses.fields(Quota)) == billing.LIMITS


def _quota_not_found() -> ApiError:
    return ApiError(404, "not_found", "quota not found")


def _external_id(value: str) -> str:
    if not value.strip() or len(value) > MAX_EXTERNAL_ID:
        raise validation_error({"external_user_id": f"must be 1 to {MAX_EXTERNAL_ID} characters"})
    return value


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
    request=Quota,
)
async def put_quota(ctx: RequestContext, external_user_id: str) -> Reply:
    external_id = _external_id(external_user_id)
    _require_admin(ctx)
    limits = dataclasses.asdict(await ctx.body(Quota))
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
