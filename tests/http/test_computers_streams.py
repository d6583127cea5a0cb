"""The desktop in a browser (contract §10): stream tokens, VNC credentials, the noVNC page
and the RFB WebSocket through the preview router, on a real Xvnc behind real websockify."""

from __future__ import annotations

import io
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
from PIL import Image

from corral.actors import previews
from corral.actors.previews.tokens import stream_key
from tests.browser import open_browser, server_ports
from tests.http.computer_support import call, create_running, websocket_upgrade
from tests.support import Api, Tenant, assert_error

SERVICE_DOMAIN = "corral.localhost"




async def credentials(api: Api, tenant: Tenant, computer_id: str) -> dict[str, Any]:
    response = await call(api, tenant, "GET", computer_id, "/vnc-credentials")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def router_client(api: Api, **kwargs: Any) -> httpx.AsyncClient:
    """Requests to the preview router, whatever host name the URL names."""
    transport = httpx.AsyncHTTPTransport()
    return httpx.AsyncClient(transport=transport, follow_redirects=False, timeout=10, **kwargs)


async def get_page(api: Api, url: str, cookie: str | None = None) -> httpx.Response:
    parts = urlsplit(url)
    local = f"http://127.0.0.1:{api.platform.settings.preview_port}{parts.path}" + (f"?{parts.query}" if parts.query else "")
    headers = {"Host": parts.netloc, **({"Cookie": cookie} if cookie else {})}
    async with router_client(api) as client:
        return await client.get(local, headers=headers)


async def test_stream_token_vnc_credentials_and_urls(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid, slug = computer["id"], computer["slug"]
    port = runtime_api.platform.settings.preview_port
    minted = await call(runtime_api, owner, "POST", cid, "/stream-token")
    assert minted.status_code == 200 and set(minted.json()) == {"token", "expires_at"}
    assert abs(minted.json()["expires_at"] - (time.time() + 600)) < 5
    creds = await credentials(runtime_api, owner, cid)
    assert set(creds) == {"desktop_url", "ws_url", "token", "expires_at", "computer_id", "slug"}
    assert creds["computer_id"] == cid and creds["slug"] == slug
    assert creds["desktop_url"] == f"http://{slug}.{SERVICE_DOMAIN}:{port}/"
    assert creds["ws_url"] == f"ws://{slug}.{SERVICE_DOMAIN}:{port}/stream?auth={creds['token']}"
    urls = await call(runtime_api, owner, "GET", cid, "/urls")
    assert urls.json() == {
        "desktop_url": f"http://{slug}.{SERVICE_DOMAIN}:{port}/",
        "stream_url": f"ws://{slug}.{SERVICE_DOMAIN}:{port}/stream",
        "terminal_url": f"ws://{slug}.{SERVICE_DOMAIN}:{port}/terminal",
        "computer_id": cid,
    }
    assert computer["desktop_url"] == urls.json()["desktop_url"] == computer["sandbox_url"]

    other = await runtime_api.create_tenant("Other")
    for method, suffix in (("POST", "/stream-token"), ("GET", "/vnc-credentials"), ("GET", "/urls")):
        assert_error(await call(runtime_api, other, method, cid, suffix), 404, "COMPUTER_NOT_FOUND")
        assert_error(await call(runtime_api, owner, method, "6a3e8a4c-2b7f-4a8e-9c1d-0f4b2e6d8a10", suffix), 404, "COMPUTER_NOT_FOUND")
        assert_error(await call(runtime_api, owner, method, "nope", suffix), 400, "INVALID_ID")


async def test_the_rfb_handshake_through_ws_url(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    creds = await credentials(runtime_api, owner, computer["id"])
    status, first = await websocket_upgrade(runtime_api, creds["ws_url"])
    assert status == 101
    assert first.startswith(b"RFB 003.00") and first.endswith(b"\n")


async def test_refused_tokens_before_the_upgrade(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    other = await create_running(runtime_api, owner)
    creds = await credentials(runtime_api, owner, computer["id"])
    stream = creds["ws_url"].split("?")[0]
    key = stream_key(runtime_api.platform.jwt_secret)
    expired = previews.sign_stream_token(key, computer["id"], int(time.time()) - 1)
    others = (await credentials(runtime_api, owner, other["id"]))["token"]
    sandbox_style = previews.sign_preview_token(previews.tokens.preview_key(runtime_api.platform.jwt_secret), computer["id"], int(time.time()) + 60)
    for url in (stream, f"{stream}?auth=dt_wrong", f"{stream}?auth={expired}", f"{stream}?auth={others}", f"{stream}?auth={sandbox_style}"):
        status, body = await websocket_upgrade(runtime_api, url)
        assert status == 401, (url, body)
    # The token of the other computer opens that one.
    other_creds = await credentials(runtime_api, owner, other["id"])
    assert (await websocket_upgrade(runtime_api, other_creds["ws_url"]))[0] == 101
    # An expired cookie is refused the same way.
    assert (await websocket_upgrade(runtime_api, stream, cookie=f"corral_desktop={expired}"))[0] == 401


async def test_the_desktop_page_trades_the_token_for_a_cookie(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    creds = await credentials(runtime_api, owner, computer["id"])
    opened = await get_page(runtime_api, f"{creds['desktop_url']}?auth={creds['token']}")
    assert opened.status_code == 302 and opened.headers["location"] == "/"
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith(f"corral_desktop={creds['token']};") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    jar = f"corral_desktop={creds['token']}"
    root = await get_page(runtime_api, creds["desktop_url"], cookie=jar)
    assert root.status_code == 302 and root.headers["location"].startswith("/vnc.html?autoconnect=true")
    novnc = await get_page(runtime_api, creds["desktop_url"] + root.headers["location"].lstrip("/"), cookie=jar)
    assert novnc.status_code == 200 and "noVNC" in novnc.text
    script = await get_page(runtime_api, creds["desktop_url"] + "app/ui.js", cookie=jar)
    assert script.status_code == 200 and "RFB" in script.text
    assert script.headers["content-type"].startswith("text/javascript")  # ES modules need it
    assert (await get_page(runtime_api, creds["desktop_url"] + "core/no-such.js", cookie=jar)).status_code == 404
    assert (await get_page(runtime_api, creds["desktop_url"] + "..%2f..%2f..%2fetc/passwd", cookie=jar)).status_code == 404
    # With the cookie, the stream opens too (what the page does).
    assert (await websocket_upgrade(runtime_api, creds["ws_url"].split("?")[0], cookie=jar))[0] == 101

    refused = await get_page(runtime_api, creds["desktop_url"])
    assert refused.status_code == 401 and "needs a stream token" in refused.text
    unknown = await get_page(runtime_api, f"http://no-such-computer.{SERVICE_DOMAIN}:1/")
    assert unknown.status_code == 404

    assert (await call(runtime_api, owner, "POST", computer["id"], "/stop")).status_code == 200
    await trio.sleep(2.1)  # the router's cache of the computer
    stopped = await get_page(runtime_api, creds["desktop_url"] + "vnc.html", cookie=jar)
    assert stopped.status_code == 503 and "is stopped" in stopped.text


async def test_a_browser_opens_desktop_url_and_sees_the_desktop(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner, resolution="1024x768")
    creds = await credentials(runtime_api, owner, computer["id"])
    async with open_browser(host_rules="MAP * 127.0.0.1", ports=server_ports(runtime_api)) as browser:
        page = await browser.new_page(f"{creds['desktop_url']}?auth={creds['token']}")
        assert await page.wait_for("location.pathname === '/vnc.html'")
        assert "auth=" not in await page.evaluate("location.href")
        # noVNC connected: its canvas has the remote screen's size and the status says so.
        connected = "document.documentElement.classList.contains('noVNC_connected')"
        with trio.move_on_after(30):
            await page.wait_for(connected, timeout=30)
        if not await page.evaluate(connected):
            # Under heavy load a few of the page's ~60 module loads can fail at the network
            # level (an open issue, see the closing note); what a user does is reload, and
            # the cookie makes the second load work without the token.
            await page.navigate(await page.evaluate("location.href"))
            with trio.move_on_after(30):
                await page.wait_for(connected, timeout=30)
        status = await page.evaluate("document.getElementById('noVNC_status').innerText")
        loaded = await page.evaluate(
            "performance.getEntriesByType('resource').map(e => e.name.split('/').slice(3).join('/') + ' ' + e.responseStatus)"
        )
        classes = await page.evaluate("document.documentElement.className")
        assert await page.evaluate(connected), f"noVNC did not connect: {status!r} {classes!r} {loaded}"
        size = await page.evaluate("(() => { const c = document.querySelector('#noVNC_container canvas'); return [c.width, c.height]; })()")
        assert size == [1024, 768]
        await trio.sleep(0.5)  # the first frame is drawn
        shot = Image.open(io.BytesIO(await page.screenshot())).convert("RGB")
        colours = shot.getcolors(maxcolors=1 << 20) or []
        desktop_blue = sum(count for count, rgb in colours if rgb == (0x30, 0x50, 0x6E))
        assert desktop_blue > shot.width * shot.height // 4, sorted(colours, reverse=True)[:5]
