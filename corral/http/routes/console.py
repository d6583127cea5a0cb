"""The web console at `/` (contract §17): one HTML page and plain ES modules, no framework,
every asset served from the package (`corral/http/console/`), nothing from a CDN.

The page signs in with an e-mail and password (`/api/v1/auth/login`, refreshed before
the access token expires) or with an API key, keeps the credential in the tab's
`sessionStorage` only, and then calls the public API like any client: it has no
route, cookie or privilege of its own, so everything it shows obeys the same scopes,
roles and tenant isolation as the API.

Vendored libraries (versions and licences in `console/vendor/README.md`):

- xterm.js (`@xterm/xterm` with `@xterm/addon-fit`) draws terminals. A computer's
  terminal is its PTY WebSocket (`POST /computers/{id}/terminal`, `ws_url` with the
  stream token). Sandboxes have no PTY route, so a sandbox's terminal is a line
  prompt drawn in xterm.js whose commands go to `POST /sandboxes/{id}/exec`.
- noVNC (`@novnc/novnc`, its ES-module core) draws a computer's desktop inside the
  console, connected straight to `ws_url` of `GET /computers/{id}/vnc-credentials`
  (the stream token is in the URL). It is vendored rather than embedding the preview
  router's noVNC page in an iframe because that page authenticates its files and
  stream with a `SameSite=Lax` host cookie, which browsers do not send inside a
  frame of another site: the console on `127.0.0.1:8080` and the desktop on
  `{slug}.corral.localhost:8081` are different sites, so the frame would be refused.
  A WebSocket with the token in its URL needs no cookie and works from wherever the
  console is served. The router's own page stays one click away ("open in a new tab").

The page's Content-Security-Policy allows scripts and styles from this origin only
(inline styles too: xterm.js sets them), connections to this origin and to
WebSockets (the computer hosts of the preview router), and no framing.
"""

from __future__ import annotations

from pathlib import Path

from quart import Response

from corral.errors import not_found
from corral.static_files import StaticFile, StaticFiles

from ..context import RequestContext
from ..routing import Router

router = Router("console", prefix="")

ROOT = Path(__file__).resolve().parent.parent / "console"
FILES = StaticFiles(ROOT)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:;"
    " connect-src 'self' ws: wss:; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'"
)
VENDOR_MAX_AGE = 86_400
"""Vendored libraries change only with a release of Corral; the console's own modules
are revalidated on every load (`no-cache` with an ETag: a 304 when unchanged)."""


def _reply(ctx: RequestContext, found: StaticFile, cache: str) -> Response:
    if ctx.request.headers.get("If-None-Match") == found.etag:
        response = Response(b"", status=304)
    else:
        response = Response(found.body, status=200, content_type=found.content_type)
    response.headers["ETag"] = found.etag
    response.headers["Cache-Control"] = cache
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@router.get("/", summary="The web console (HTML): sign in, sandboxes, computers, deployments, credits", auth="public", content_type="text/html")
async def index(ctx: RequestContext) -> Response:
    found = await FILES.get("index.html")
    if found is None:  # a broken installation: the package data is missing
        raise not_found("the console is not installed")
    response = _reply(ctx, found, "no-cache")
    response.headers["Content-Security-Policy"] = CSP
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    return response


@router.get(
    "/console/{path:path}",
    summary="The console's modules, styles and vendored libraries (xterm.js, noVNC)",
    auth="public",
    content_type="text/javascript",
)
async def asset(ctx: RequestContext, path: str) -> Response:
    found = await FILES.get(path)
    if found is None:
        raise not_found(f"the console has no file {path}")
    cache = f"public, max-age={VENDOR_MAX_AGE}" if path.startswith("vendor/") else "no-cache"
    return _reply(ctx, found, cache)
