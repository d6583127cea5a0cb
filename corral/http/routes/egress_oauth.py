"""OAuth connect routes (contract §11, docs/api.md "Egress"): providers, start, the
public callback the browser returns to, and a flow's status.

The callback is public (the browser arrives from the provider with `code` and
`state`) and answers a small HTML page; the state ties it to its tenant. Every other
route is the caller's tenant's: another tenant's provider or state is 404.
"""

from __future__ import annotations

import html

from quart import Response

from corral.actors import egress

from ..context import RequestContext
from ..replies import Reply, data, no_content, raw
from ..routing import Router

router = Router("egress oauth", tenant_wide=True)  # keys restricted to a workspace: 403


def _caller(ctx: RequestContext) -> egress.Caller:
    principal = ctx.principal
    return egress.Caller(ctx.tenant_id, principal.is_tenant_admin, principal.user_id)


def _api_base(ctx: RequestContext) -> str:
    """The configured public URL of the API; without one, the Host the caller used."""
    return (ctx.platform.settings.public_api_url or ctx.request.host_url).rstrip("/")


@router.get("/egress/oauth/providers", summary="OAuth providers (the operator's merged with the tenant's), no client secrets", scope="egress:read")
async def list_providers(ctx: RequestContext) -> Reply:
    found = await egress.providers_of(ctx.platform, ctx.tenant_id, ctx.platform.settings.oauth_providers)
    return data([egress.provider_public(provider) for provider in found])


@router.post(
    "/egress/oauth/admin/providers",
    summary="Register the tenant's own OAuth client for a provider (owner or admin)",
    scope="egress:write",
    action="egress.oauth.providers.create",
    status=201,
    request=egress.NewProvider,
)
async def create_provider(ctx: RequestContext) -> Reply:
    fields = await ctx.body(egress.NewProvider)
    provider = await egress.register_provider(
        ctx.platform, _caller(ctx), fields, allow_private=ctx.platform.settings.allow_private_destinations
    )
    ctx.audit.update(resource_type="egress_oauth_provider", resource_id=provider.id)
    return data(egress.provider_public(provider), 201)


@router.delete(
    "/egress/oauth/admin/providers/{id}",
    summary="Remove the tenant's OAuth client for a provider (owner or admin)",
    scope="egress:write",
    action="egress.oauth.providers.delete",
    status=204,
)
async def delete_provider(ctx: RequestContext, id: str) -> Reply:
    ctx.audit.update(resource_type="egress_oauth_provider", resource_id=id)
    await egress.delete_provider(ctx.platform, _caller(ctx), id)
    return no_content()


@router.post(
    "/egress/oauth/start",
    summary="Begin connecting an OAuth account: `{authorize_url, state}`, unwrapped (the provider's authorize URL, PKCE S256)",
    scope="egress:write",
    action="egress.oauth.start",
    request=egress.OAuthStart,
)
async def start(ctx: RequestContext) -> Reply:
    fields = await ctx.body(egress.OAuthStart)
    authorize_url, state = await egress.start_oauth(
        ctx.platform, _caller(ctx), fields, operator_file=ctx.platform.settings.oauth_providers, api_base=_api_base(ctx)
    )
    return raw({"authorize_url": authorize_url, "state": state})  # the specification's explicit shape (contract §3)


@router.get(
    "/egress/oauth/status",
    summary="A flow's status: pending, complete (with secret_id) or failed (with error)",
    scope="egress:read",
    query={"state": "the state start answered"},
)
async def status(ctx: RequestContext) -> Reply:
    state = ctx.query("state") or ""
    return data(egress.flow_public(await egress.flow_status(ctx.platform, ctx.tenant_id, state)))


def _page(title: str, message: str, status: int) -> Response:
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>"
    )
    response = Response(document, status=status, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "default-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    return response


@router.get(
    "/egress/oauth/callback",
    summary="Where the provider sends the browser back: the code is exchanged and the tokens stored (HTML)",
    auth="public",
    content_type="text/html",
    query={"code": "the authorization code", "state": "the flow's state", "error": "the provider's refusal"},
)
async def oauth_callback(ctx: RequestContext) -> Response:
    try:
        await egress.callback(
            ctx.platform,
            state=ctx.query("state"),
            code=ctx.query("code"),
            error=ctx.query("error"),
            operator_file=ctx.platform.settings.oauth_providers,
            allow_private=ctx.platform.settings.allow_private_destinations,
        )
    except egress.CallbackError as exc:
        return _page("Connection failed", exc.message, exc.status)
    return _page("Connected", "The account is connected. You can close this window.", 200)
