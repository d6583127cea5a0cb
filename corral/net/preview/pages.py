"""The router's own HTML pages: readable refusals instead of bare status codes.

Every page says what happened and what to do about it, because the person who sees
it is often not the one who set the preview up (a shared link). Each response also
carries `X-Corral-Preview-Error: <reason>` so scripts can tell the cases apart.
"""

from __future__ import annotations

import html

from .http1 import reason_phrase
from .routes import Reply

_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2230}"
    "main{max-width:40rem;margin:12vh auto;padding:2rem;background:#fff;border-radius:12px;"
    "box-shadow:0 1px 4px rgba(0,0,0,.08)}h1{font-size:1.35rem;margin:0 0 .75rem}"
    "code{background:#eef0f4;padding:.1rem .3rem;border-radius:4px}"
    "p.status{color:#6b7280;font-size:.85rem;margin-top:2rem}"
)

def page(status: int, reason: str, title: str, message: str, hint: str | None = None,
         headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """An HTML page. `message` is plain text; `hint` may hold trusted markup (`<code>`)."""
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body><main>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(message)}</p>"
        + (f"<p>{hint}</p>" if hint else "")
        + f"<p class=status>{status} {reason_phrase(status)} &middot; Corral preview</p></main></body></html>"
    )
    return Reply(status, body.encode(), (("X-Corral-Preview-Error", reason), ("Cache-Control", "no-store"), *headers))


def not_listening(label: str, port: int) -> Reply:
    return page(
        502,
        "not_listening",
        "Nothing is listening yet",
        f"The preview router could not reach {label or f'port {port}'}: no app accepts connections on port {port}.",
        "Start your app inside the sandbox and reload this page. Dev servers often need to be told the port, "
        f"for example <code>python3 -m http.server {port}</code>, <code>flask run --port {port}</code> or "
        f"<code>vite --port {port}</code>. Apps bound to <code>127.0.0.1</code> or to <code>0.0.0.0</code> both work.",
    )


def upstream_failed(label: str, detail: str) -> Reply:
    return page(502, "bad_upstream", "The app did not answer properly", f"{label or 'The app'} {detail}.",
                "Check the app's own logs inside the sandbox, then reload this page.")


def bad_request(status: int, detail: str) -> Reply:
    return page(status, "bad_request", "The preview router could not read this request", detail)


def no_route(host: str) -> Reply:
    return page(
        404,
        "no_route",
        "No preview lives at this address",
        f"{host or 'This host'} does not name a preview.",
        "Sandbox previews live at <code>{port}-{slug}.sandbox.{domain}</code>; "
        "<code>POST /api/v1/sandboxes/{id}/expose</code> gives the exact URL.",
    )


def router_failed() -> Reply:
    return page(500, "router_error", "The preview router failed", "Something went wrong on our side while routing this request.",
                "Reload the page; if it keeps happening, the operator finds the details in the server log.")
