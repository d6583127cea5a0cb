"""A computer's desktop in a browser: stream tokens, VNC credentials and URLs (contract §10).

The page and the streams themselves are served by the preview router on the
computer's host (`corral.actors.previews.desktops`); these routes hand out where
and the token that opens them.
"""

from __future__ import annotations

from corral.actors import previews

from ..context import RequestContext
from ..replies import Reply, raw
from ..routing import Router
from .computers import READ, WRITE, computer_row

router = Router("computers")


@router.post(
    "/computers/{id}/stream-token",
    summary="A token (10 minutes) that opens this computer's desktop page, RFB stream and terminals as ?auth=",
    scope=WRITE,
    action="computers.stream_token",
)
async def stream_token(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    token, expires_at = previews.mint_stream_token(ctx.platform, row.id)
    return raw({"token": token, "expires_at": expires_at})


@router.get(
    "/computers/{id}/vnc-credentials",
    summary="The desktop page and RFB WebSocket with a fresh stream token",
    scope=WRITE,
)
async def vnc_credentials(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    urls = await previews.desktop_urls(ctx.platform, row)
    token, expires_at = previews.mint_stream_token(ctx.platform, row.id)
    return raw(
        {
            "desktop_url": urls["desktop_url"],
            "ws_url": f"{urls['stream_url']}?auth={token}",
            "token": token,
            "expires_at": expires_at,
            "computer_id": row.id,
            "slug": row.slug,
        }
    )


@router.get("/computers/{id}/urls", summary="Where the desktop, its stream and the terminal are served (no tokens)", scope=READ)
async def urls(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return raw({**await previews.desktop_urls(ctx.platform, row), "computer_id": row.id})
