"""A real browser (headless Chromium) opens a share link of a sandbox's app.

The page loads a script and an image and opens a WebSocket, all through the
preview router on the strength of the cookie the share link left for that host.
"""

from __future__ import annotations

from tests.browser import open_browser, server_ports
from tests.http.preview_support import API, expose, new_sandbox, share, start_app, wait_ready
from tests.support import Api


async def test_share_link_in_a_browser_loads_assets_and_a_websocket(runtime_api: Api) -> None:
    api = runtime_api
    owner = await api.create_tenant()
    sandbox = await new_sandbox(api, owner, name="browser")
    await start_app(api, owner, sandbox["id"], 8000)
    await expose(api, owner, sandbox["id"], 8000)
    await wait_ready(api, sandbox["id"], 8000)
    link = await share(api, owner, sandbox["id"])

    async with open_browser(host_rules="MAP * 127.0.0.1", ports=server_ports(api)) as browser:
        page = await browser.new_page(link["url"])
        assert await page.wait_for("window.scriptRan === true && window.imageLoaded === true")
        echoes = await page.wait_for("window.echoes.length > 0 && window.echoes")
        assert echoes == ["echo: hello over the router"]
        href = await page.evaluate("location.href")
        assert "ms=" not in href and href.startswith(f"http://8000-{sandbox['slug']}.sandbox.corral.localhost:")
        assert "corral_preview" not in await page.evaluate("document.cookie")  # HttpOnly
        assert await page.evaluate("document.getElementById('pixel').naturalWidth") == 1

        revoked = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}/shares/{link['id']}", key=owner.key)
        assert revoked.status_code == 200
        await page.navigate(href)
        assert "This link was revoked" in await page.evaluate("document.body.innerText")
