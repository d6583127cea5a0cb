"""Webhooks: the specification's endpoint table (docs/api.md "Webhooks").

Webhooks are tenant-wide (every event of the tenant can reach them, and their
headers may carry credentials), so every route needs a tenant owner or admin and a
key that is not restricted to one workspace.
"""

from __future__ import annotations

from corral.actors import webhooks
from corral.errors import forbidden

from ..context import RequestContext
from ..params import Integer
from ..replies import Reply, data, no_content, raw
from ..routing import Router

router = Router("webhooks")

def _require_admin(ctx: RequestContext) -> str:
    principal = ctx.principal
    tenant_id = ctx.tenant_id
    if principal.workspace_id is not None:
        raise forbidden("webhooks are tenant-wide; this key is restricted to one workspace")
    if not principal.is_tenant_admin:
        raise forbidden("managing webhooks needs a tenant owner or admin")
    return tenant_id


async def _webhook(ctx: RequestContext, id: str) -> webhooks.WebhookRecord:
    tenant_id = _require_admin(ctx)
    webhook = await webhooks.find_webhook(ctx.platform, tenant_id, id)
    ctx.audit.update(resource_type="webhook", resource_id=webhook.id)
    return webhook


@router.get("/webhooks", summary="The tenant's webhooks", scope="webhooks:read")
async def list_(ctx: RequestContext) -> Reply:
    tenant_id = _require_admin(ctx)
    return data([webhooks.webhook_public(hook) for hook in await webhooks.list_webhooks(ctx.platform, tenant_id)])


@router.post(
    "/webhooks",
    summary="Create a webhook; the response shows its signing secret, once",
    scope="webhooks:write",
    action="webhooks.create",
    status=201,
    request=webhooks.NewWebhook,
)
async def create(ctx: RequestContext) -> Reply:
    tenant_id = _require_admin(ctx)
    fields = await ctx.body(webhooks.NewWebhook)
    webhook, secret = await webhooks.create_webhook(ctx.platform, tenant_id, ctx.principal.user_id, fields)
    ctx.audit.update(resource_type="webhook", resource_id=webhook.id)
    return data({**webhooks.webhook_public(webhook), "secret": secret}, 201)


@router.get("/webhooks/{id}", summary="One webhook (without its secret)", scope="webhooks:read")
async def get(ctx: RequestContext, id: str) -> Reply:
    return data(webhooks.webhook_public(await _webhook(ctx, id)))


@router.patch(
    "/webhooks/{id}",
    summary="Change a webhook's fields (not its secret)",
    scope="webhooks:write",
    action="webhooks.update",
    request=webhooks.WebhookFields,
)
async def update(ctx: RequestContext, id: str) -> Reply:
    webhook = await _webhook(ctx, id)
    fields = await ctx.body(webhooks.WebhookFields)
    return data(webhooks.webhook_public(await webhooks.update_webhook(ctx.platform, webhook, fields)))


@router.delete(
    "/webhooks/{id}",
    summary="Delete a webhook with its queued and past deliveries",
    scope="webhooks:write",
    action="webhooks.delete",
    status=204,
)
async def delete(ctx: RequestContext, id: str) -> Reply:
    await webhooks.delete_webhook(ctx.platform, await _webhook(ctx, id))
    return no_content()


@router.post(
    "/webhooks/{id}/test",
    summary="Send a synthetic webhook.test event now and report the answer",
    scope="webhooks:write",
    action="webhooks.test",
)
async def test(ctx: RequestContext, id: str) -> Reply:
    return raw(await webhooks.send_test_event(ctx.platform, await _webhook(ctx, id)))


@router.get(
    "/webhooks/{id}/deliveries",
    summary="Delivery attempts, newest first",
    scope="webhooks:read",
    query={
        "limit": Integer("page size", webhooks.DELIVERIES_DEFAULT_LIMIT, maximum=webhooks.DELIVERIES_MAX_LIMIT),
        "cursor": "next_cursor of the previous page",
        "status": "only `delivered` or only `failed` attempts",
    },
)
async def deliveries(ctx: RequestContext, id: str) -> Reply:
    webhook = await _webhook(ctx, id)
    limit = ctx.query_int("limit")
    attempts, next_cursor = await webhooks.list_deliveries(
        ctx.platform, webhook, limit=limit, cursor=ctx.query("cursor") or None, status=ctx.query("status") or None
    )
    return data([webhooks.delivery_public(attempt) for attempt in attempts], next_cursor=next_cursor)
