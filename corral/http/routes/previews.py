"""Sandbox previews: expose a port, mint preview tokens, share and revoke links (docs/api.md "Previews")."""

from __future__ import annotations

from corral.actors import previews

from ..context import RequestContext
from ..replies import Reply, data, raw
from ..routing import Router
from .sandboxes import _sandbox

router = Router("previews")


@router.post(
    "/sandboxes/{id}/expose",
    summary="Expose a port of the sandbox at its preview URL; sandbox.preview.ready follows once it answers",
    scope="sandboxes:write",
    action="sandboxes.expose",
    request=previews.ExposePort,
)
async def expose(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return raw(await previews.expose(ctx.platform, row, (await ctx.body(previews.ExposePort)).port))


@router.post(
    "/sandboxes/{id}/preview-token",
    summary="A signed preview token (mp_) for this sandbox's exposed ports (default 3600 s, max 86400 s)",
    scope="sandboxes:write",
    action="sandboxes.preview_token",
    request=previews.PreviewTokenRequest,
)
async def preview_token(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(await previews.mint_preview_token(ctx.platform, row, await ctx.body(previews.PreviewTokenRequest)))


@router.post(
    "/sandboxes/{id}/shares",
    summary="A public share link (ms_ token, passed as ?ms=); no expiry unless expires_in is given",
    scope="sandboxes:write",
    action="sandboxes.share",
    status=201,
    request=previews.ShareRequest,
)
async def create_share(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(await previews.create_share(ctx.platform, row, ctx.principal.user_id, await ctx.body(previews.ShareRequest)), 201)


@router.get("/sandboxes/{id}/shares", summary="The sandbox's share links that are not revoked (without their tokens)", scope="sandboxes:read")
async def list_shares(ctx: RequestContext, id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(await previews.list_shares(ctx.platform, row))


@router.delete(
    "/sandboxes/{id}/shares/{share_id}",
    summary="Revoke a share link; the router refuses it from the next request on",
    scope="sandboxes:write",
    action="sandboxes.unshare",
)
async def revoke_share(ctx: RequestContext, id: str, share_id: str) -> Reply:
    row = await _sandbox(ctx, id)
    return data(await previews.revoke_share(ctx.platform, row, share_id))
