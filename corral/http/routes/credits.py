"""Credits (spec "Credits"; unwrapped bodies) and the operator's grant (contract §2)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated

from corral.actors import billing, tenancy
from corral.errors import ApiError, not_found
from corral.models import Rule, model
from corral.storage import parse_iso, to_iso, utc_now

from ..context import RequestContext, require_uuid
from ..params import Integer, Moment
from ..replies import Reply, data, raw
from ..routing import Router

router = Router("credits")

PAGE_SIZE_DEFAULT = 20
PAGE_SIZE_MAX = 100
USAGE_DEFAULT_DAYS = 30

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
_SPACED_OFFSET = re.compile(r" (\d{2}:\d{2})$")


def parse_rfc3339(text: str) -> datetime | None:
    """An RFC 3339 date-time, or None. A `+` offset that arrived unencoded in a query
    string (and so became a space) is read as `+`."""
    text = _SPACED_OFFSET.sub(r"+\1", text.strip()) if len(text.strip()) > 19 else text.strip()
    if not _RFC3339.match(text):
        return None
    fraction = re.search(r"\.(\d+)", text)
    if fraction and len(fraction[1]) > 6:  # Python reads at most microseconds
        text = text.replace(fraction[0], "." + fraction[1][:6])
    try:
        return parse_iso(text)
    except ValueError:
        return None


@router.get("/credits/balance", summary="The tenant's credit balance (zeros and nulls before any credit)", scope="billing:read")
async def balance(ctx: RequestContext) -> Reply:
    return raw(await billing.get_balance(ctx.platform, ctx.tenant_id))


@router.get(
    "/credits/transactions",
    summary="Ledger rows, newest first",
    scope="billing:read",
    query={
        "page": Integer("1-based page", 1),
        "page_size": Integer(f"rows per page; above {PAGE_SIZE_MAX} it is {PAGE_SIZE_MAX}", PAGE_SIZE_DEFAULT),
    },
)
async def transactions(ctx: RequestContext) -> Reply:
    page = ctx.query_int("page")
    page_size = min(ctx.query_int("page_size"), PAGE_SIZE_MAX)
    rows, total = await billing.list_transactions(ctx.platform, ctx.tenant_id, page, page_size)
    return raw(
        {"transactions": [billing.transaction_public(row) for row in rows], "total": total, "page": page, "page_size": page_size}
    )


@router.get(
    "/credits/usage",
    summary="Credits spent, tokens and calls by UTC day, provider and model",
    scope="billing:read",
    query={
        "from": Moment("default 30 days ago", parse_rfc3339, lambda name: ApiError(400, "INVALID_PARAM", f"invalid '{name}' timestamp")),
        "to": Moment("default now", parse_rfc3339, lambda name: ApiError(400, "INVALID_PARAM", f"invalid '{name}' timestamp")),
    },
)
async def usage(ctx: RequestContext) -> Reply:
    now = utc_now()
    raw_from, raw_to = ctx.query("from"), ctx.query("to")
    start = parse_rfc3339(raw_from) if raw_from is not None else now - timedelta(days=USAGE_DEFAULT_DAYS)
    if start is None:
        raise ApiError(400, "INVALID_PARAM", "invalid 'from' timestamp")
    end = parse_rfc3339(raw_to) if raw_to is not None else now
    if end is None:
        raise ApiError(400, "INVALID_PARAM", "invalid 'to' timestamp")
    if start >= end:
        raise ApiError(400, "INVALID_PARAM", "'from' must be before 'to'")
    entries = await billing.usage(ctx.platform, ctx.tenant_id, start, end)
    return raw({"usage": entries, "from": to_iso(start), "to": to_iso(end)})


MAX_GRANT = 10**12
"""Credits one grant may add or take: far above any real grant, and a balance of many of
them still fits the ledger's 64-bit integers."""


@model(missing="details")
class Grant:
    """Positive: an earn row expiring in 180 days; negative: an adjust row."""

    amount_credits: Annotated[
        int,
        Rule(
            minimum=-MAX_GRANT,
            maximum=MAX_GRANT,
            check=lambda amount: "must not be zero" if amount == 0 else None,
            schema={"not": {"const": 0}},
        ),
    ]
    description: Annotated[str, Rule(max_length=500)]


@router.post(
    "/admin/tenants/{id}/credits",
    summary="Grant credits to a tenant (an earn row expiring in 180 days), or take some (negative: an adjust row)",
    auth="admin",
    action="credits.grant",
    status=201,
    request=Grant,
)
async def grant(ctx: RequestContext, id: str) -> Reply:
    tenant_id = require_uuid(id, "tenant id")
    body = await ctx.body(Grant)
    amount, description = body.amount_credits, body.description
    if await tenancy.get_tenant(ctx.db, tenant_id) is None:
        raise not_found("tenant not found")
    ctx.audit.update(tenant_id=tenant_id, resource_type="tenant", resource_id=tenant_id)
    row = await billing.grant_credits(ctx.platform, tenant_id, amount, description, user_id=ctx.principal.user_id)
    return data(billing.transaction_public(row), 201)
