"""Browser tokens (contract §16): mint an `mbt_` token for one sandbox."""

from __future__ import annotations

from corral.actors import browser_tokens

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router
from .sandboxes import _sandbox

router = Router("browser tokens")


@router.post(
    "/browser-tokens",
    summary="Mint a browser token (mbt_) for one sandbox's routes; expires_in 1-86400 s, default 3600",
    scope="sandboxes:write",
    action="browser_tokens.create",
    status=201,
    request=browser_tokens.NewBrowserToken,
)
async def create(ctx: RequestContext) -> Reply:
    body = await ctx.body(browser_tokens.NewBrowserToken)
    principal = ctx.principal
    sandbox = await _sandbox(ctx, body.sandbox_id)
    minted = await browser_tokens.mint(
        ctx.db,
        sandbox,
        user_id=principal.user_id,
        api_key_id=principal.api_key_id,
        workspace_id=principal.workspace_id,
        scopes=principal.scopes,
        expires_in=body.expires_in,
    )
    return data(minted, 201)
