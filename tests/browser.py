"""A small headless-Chromium driver for browser tests, over the DevTools protocol.

    async with open_browser(host_rules="MAP * 127.0.0.1") as browser:
        page = await browser.new_page("http://127.0.0.1:8080/page")
        await page.wait_for("document.readyState === 'complete'")
        value = await page.evaluate("window.seen.length")

Chromium is Debian's `chromium` (installed by tools/install --test). Each browser
gets its own profile directory and debugging port, and is killed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from tests.browser_network import BrowserNetwork, browser_network
from tests.support import Api, free_port


class BrowserError(Exception):
    """The page or the browser reported an error."""


class Browser:
    def __init__(self, ws: WebSocketConnection, nursery: trio.Nursery) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        nursery.start_soon(self._read)

    async def _read(self) -> None:
        while True:
            message = json.loads(await self._ws.get_message())
            channel = self._waiting.pop(message.get("id", -1), None)
            if channel is not None:
                await channel.send(message)

    async def call(self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None) -> dict[str, Any]:
        call_id = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[call_id] = send
        request: dict[str, Any] = {"id": call_id, "method": method, "params": params or {}}
        if session_id is not None:
            request["sessionId"] = session_id
        await self._ws.send_message(json.dumps(request))
        with trio.fail_after(30):
            reply = await receive.receive()
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def new_page(self, url: str) -> Page:
        target = await self.call("Target.createTarget", {"url": "about:blank"})
        attached = await self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        await page.navigate(url)
        return page


class Page:
    def __init__(self, browser: Browser, session_id: str) -> None:
        self.browser = browser
        self.session_id = session_id

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.call(method, params, self.session_id)

    async def navigate(self, url: str) -> None:
        result = await self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {result['errorText']}")
        await self.wait_for("document.readyState === 'complete'")

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` (promises are awaited)."""
        result = await self.call(
            "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self) -> bytes:
        """A PNG of what the page shows now."""
        result = await self.call("Page.captureScreenshot", {"format": "png"})
        return base64.b64decode(result["data"])

    async def wait_for(self, condition: str, timeout: float = 20.0) -> Any:
        """Poll `condition` until it is truthy; its value."""
        with trio.fail_after(timeout):
            while True:
                value = await self.evaluate(condition)
                if value:
                    return value
                await trio.sleep(0.05)


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Chromium found: tools/install --test installs Debian's chromium")


def server_ports(api: Api) -> list[int]:
    """A test server's API and preview router ports: what a browser in its own network
    (`open_browser(ports=...)`) needs to reach."""
    return [api.platform.settings.port, api.platform.settings.preview_port]


@contextlib.asynccontextmanager
async def open_browser(*, host_rules: str | None = None, ports: Sequence[int] = ()) -> AsyncIterator[Browser]:
    """A headless Chromium; `host_rules` (e.g. "MAP * 127.0.0.1") resolves test host names.

    With `ports`, Chromium runs in a network namespace of its own where only those
    loopback ports reach the host's (`tests/browser_network.py`): it then never sees
    the host's interfaces change, which makes it abort requests in flight."""
    if ports:
        async with browser_network() as network:
            for forwarded in ports:
                await network.outward(forwarded)
            async with _open_browser(host_rules, network) as browser:
                yield browser
        return
    async with _open_browser(host_rules, None) as browser:
        yield browser


@contextlib.asynccontextmanager
async def _open_browser(host_rules: str | None, network: BrowserNetwork | None) -> AsyncIterator[Browser]:
    port = free_port()
    profile = tempfile.mkdtemp(prefix="corral-chromium-")
    argv = [
        chromium_path(),
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        f"--remote-debugging-port={port}",
        f"--user-data-dir={profile}",
    ]
    if host_rules:
        argv.append(f"--host-resolver-rules={host_rules}")
    argv.append("about:blank")
    if network is not None:
        argv = network.command(argv)
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if network is None:
            ws_url = await _debugger_url(port, process)
        else:
            reach = await network.inward(port)
            ws_url = (await _debugger_url(reach, process)).replace(f"127.0.0.1:{port}/", f"127.0.0.1:{reach}/")
        async with open_websocket_url(ws_url, max_message_size=64 * 1024 * 1024) as ws, trio.open_nursery() as nursery:
            yield Browser(ws, nursery)
            nursery.cancel_scope.cancel()
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(profile, ignore_errors=True)


async def _debugger_url(port: int, process: subprocess.Popen[bytes]) -> str:
    with trio.fail_after(30):
        async with httpx.AsyncClient() as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"chromium exited with {process.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(f"http://127.0.0.1:{port}/json/version")
                    if response.status_code == 200:
                        url: str = response.json()["webSocketDebuggerUrl"]
                        return url
                await trio.sleep(0.1)
