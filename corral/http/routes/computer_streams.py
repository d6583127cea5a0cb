"""A computer's desktop and terminals in a browser: stream tokens, VNC credentials, URLs
and terminal sessions (contract §10).

The page and the streams themselves are served by the preview router on the
computer's host (`corral.actors.previews.desktops`); these routes hand out where
and the token that opens them.
"""

from __future__ import annotations

from corral.actors import computers, previews

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


@router.post(
    "/computers/{id}/terminal",
    summary="Open a shell on a PTY (cols 80, rows 24, /bin/bash by default); its WebSocket carries ?auth=",
    scope=WRITE,
    action="computers.terminal",
    status=201,
    request=computers.NewTerminal,
)
async def open_terminal(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    session = await computers.open_terminal(ctx.platform, row, await ctx.body(computers.NewTerminal))
    urls = await previews.desktop_urls(ctx.platform, row)
    token, expires_at = previews.mint_stream_token(ctx.platform, row.id)
    data = {
        "session_id": session["session_id"],
        "ws_url": f"{urls['terminal_url']}/{session['session_id']}?auth={token}",
        "stream_auth": token,
        "expires_at": expires_at,
        "computer_id": row.id,
    }
    return raw({"data": data}, 201)


@router.post(
    "/computers/{id}/pty/{session_id}/resize",
    summary="Resize a terminal (the shell sees the new size)",
    scope=WRITE,
    action="computers.terminal.resize",
    request=computers.TerminalSize,
)
async def resize_terminal(ctx: RequestContext, id: str, session_id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    resized = await computers.resize_terminal(ctx.platform, row, session_id, await ctx.body(computers.TerminalSize))
    return raw({"status": "resized", "cols": resized["cols"], "rows": resized["rows"]})
