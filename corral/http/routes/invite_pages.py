"""The product's invite landing pages: `/invites/{token}` (org), `/workspace-invites/{token}`
(workspace), and the legacy `/invite/{token}`, which redirects to the org page.

Invite links point here (on the tenant's custom domain when it has one). A page shows
what the invite is for and its state, and a sign-in form that logs in through
`/api/v1/auth/login` and accepts through the API, so an invitee needs nothing but a
browser. Pages are not cached and send no Referer, since their URL holds the token.
"""

from __future__ import annotations

import html
import json
import secrets
from urllib.parse import quote

from quart import Response

from corral.actors.tenancy import NamedInvite, branding
from corral.actors.tenancy import invites as inv

from ..context import RequestContext
from ..routing import Router

router = Router("invite pages", prefix="")

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#1d2330}"
    "label{display:block;margin:.75rem 0 .25rem}input{width:100%;padding:.5rem;box-sizing:border-box}"
    "button{margin-top:1rem;padding:.5rem 1rem}#result{margin-top:1rem;font-weight:600}"
)

_SCRIPT = """
const invite = JSON.parse(document.getElementById("invite").textContent);
document.getElementById("accept").addEventListener("submit", async (event) => {
  event.preventDefault();
  const result = document.getElementById("result");
  const show = (text) => { result.textContent = text; };
  const credentials = {email: event.target.email.value, password: event.target.password.value};
  const login = await fetch("/api/v1/auth/login", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(credentials)});
  const session = await login.json();
  if (!login.ok) { show(session.error.message); return; }
  const accepted = await fetch(invite.accept, {method: "POST", headers: {"Authorization": "Bearer " + session.token}});
  const body = await accepted.json();
  if (!accepted.ok) { show(body.error.message); return; }
  show("Invite accepted. Sign in again to work in " + invite.place + ".");
  event.target.remove();
});
"""


def _brand_header(brand: branding.Branding | None) -> tuple[str, str]:
    """The logo (an <img>) and the colour rule of a tenant's branding; empty without one."""
    if brand is None:
        return "", ""
    logo = ""
    if brand.logo_url:
        logo = f'<img id="logo" src="{html.escape(brand.logo_url)}" alt="{html.escape(brand.name)}" style="max-height:3rem">'
    colour = f"h1,button{{color:{brand.primary_color}}}" if brand.primary_color else ""
    return logo, colour


def _page(
    title: str, paragraphs: list[str], status: int, accept: dict[str, str] | None = None, brand: branding.Branding | None = None
) -> Response:
    nonce = secrets.token_urlsafe(16)
    text = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    if brand is not None and brand.support_email:
        text += f'<p id="support">Questions? Write to <a href="mailto:{html.escape(brand.support_email)}">{html.escape(brand.support_email)}</a>.</p>'
    logo, colour = _brand_header(brand)
    form = ""
    if accept is not None:
        payload = json.dumps(accept).replace("<", "\\u003c")
        form = (
            '<form id="accept"><label for="email">E-mail</label><input id="email" name="email" type="email" required>'
            '<label for="password">Password</label><input id="password" name="password" type="password" required>'
            '<button type="submit">Sign in and accept</button></form><p id="result" role="status"></p>'
            f'<script id="invite" type="application/json">{payload}</script>'
            f'<script nonce="{nonce}">{_SCRIPT}</script>'
        )
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}{colour}</style></head>"
        f"<body>{logo}<h1>{html.escape(title)}</h1>{text}{form}</body></html>"
    )
    response = Response(document, status=status, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; connect-src 'self';"
        f"{' img-src https: http:;' if logo else ''}"
        " form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    )
    return response


async def _invite_page(ctx: RequestContext, invite: NamedInvite | None, kind: str, token: str) -> Response:
    if invite is None:
        return _page("Invite not found", ["This invite link is not valid. Ask for a new invite."], 404)
    brand = await branding.get_branding(ctx.db, invite.tenant_id)
    if invite.revoked_at is not None:
        return _page("Invite revoked", ["This invite was revoked. Ask for a new invite."], 410, brand=brand)
    place = f"the {invite.workspace_name} workspace of {brand.name}" if kind == inv.WORKSPACE else brand.name
    title = f"Join {place}"
    if invite.accepted_at is not None:
        return _page(title, ["This invite has been accepted already."], 200, brand=brand)
    if inv.is_expired(invite):
        return _page(title, ["This invite has expired. Ask for a new invite."], 410, brand=brand)
    lines = [
        f"You are invited to join {place} as {invite.role}.",
        f"Sign in as {invite.email} to accept. The invite expires at {invite.expires_at} (UTC).",
    ]
    accept_path = f"/api/v1{inv.PRODUCT_PATHS[kind]}{token}/accept"
    return _page(title, lines, 200, {"accept": accept_path, "place": place}, brand=brand)


@router.get("/invites/{token}", summary="The org invite landing page (HTML)", auth="public", content_type="text/html")
async def org_invite_page(ctx: RequestContext, token: str) -> Response:
    return await _invite_page(ctx, await inv.find_by_token(ctx.db, inv.TENANT, token), inv.TENANT, token)


@router.get(
    "/workspace-invites/{token}", summary="The workspace invite landing page (HTML)", auth="public", content_type="text/html"
)
async def workspace_invite_page(ctx: RequestContext, token: str) -> Response:
    return await _invite_page(ctx, await inv.find_by_token(ctx.db, inv.WORKSPACE, token), inv.WORKSPACE, token)


@router.get(
    "/invite/{token}",
    summary="Legacy invite link: redirects (301) to the org invite landing page",
    auth="public",
    status=301,
    content_type="text/html",
)
async def legacy_invite(ctx: RequestContext, token: str) -> Response:
    response = Response("", status=301)
    response.headers["Location"] = f"/invites/{quote(token, safe='')}"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response
