"""The web console driven in a real headless Chromium against a real server with real
instances: sign in, create a sandbox and use its terminal, processes, live logs,
previews and share links; create a computer, watch it provision, see its desktop
(pixels checked) and type in its terminal; credits, deployments (versions, promote,
publish with progress: those two run when the server has deployments), token refresh
and signing out. Chromium runs in a network namespace of its own (`console_browser`),
so that the host's interfaces changing under other tests cannot abort its requests."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from PIL import Image

from tests.browser import Browser, Page, open_browser, server_ports
from tests.support import PASSWORD, RUNTIME_SETTINGS, TEMPLATE_CACHE, Api, Tenant, running_server

from .test_sandboxes import run

SHOTS = Path(os.environ["CORRAL_CONSOLE_SHOTS"]) if os.environ.get("CORRAL_CONSOLE_SHOTS") else None
"""A directory to keep screenshots of the console in (for a person to look at), if set."""


def console_browser(api: Api) -> contextlib.AbstractAsyncContextManager[Browser]:
    """Chromium in a network of its own, reaching the server's API and preview ports only."""
    return open_browser(ports=server_ports(api))


async def expect(page: Page, condition: str, timeout: float = 20.0) -> Any:
    """`page.wait_for` (an element counts as true), failing with what the page shows
    (its markup and toasts) instead of a bare timeout."""
    try:
        return await page.wait_for(f"(() => {{ const v = ({condition}); return v instanceof Node ? true : v; }})()", timeout=timeout)
    except trio.TooSlowError:
        shown = await page.evaluate("document.getElementById('main').outerHTML.slice(0, 3000) + ' | toasts: ' + document.getElementById('toast').innerText"
            " + ' | loaded: ' + performance.getEntriesByType('resource').map(e => e.name.split('/').slice(3).join('/') + ' ' + e.responseStatus).join(', ')")
        raise AssertionError(f"timed out waiting for {condition}; the page shows: {shown}") from None


async def fill(page: Page, values: dict[str, str], form: str) -> None:
    """Sets the inputs `values` (by id) and submits `form` as a user would."""
    script = ";".join(f"document.getElementById({json.dumps(k)}).value = {json.dumps(v)}" for k, v in values.items())
    await page.evaluate(f"{script}; document.getElementById({json.dumps(form)}).requestSubmit(); true")


async def click(page: Page, selector: str) -> None:
    await expect(page, f"document.querySelector({json.dumps(selector)})")
    await page.evaluate(f"document.querySelector({json.dumps(selector)}).click(); true")


async def click_button(page: Page, within: str, label: str) -> None:
    """Clicks the button labelled `label` inside `within`, once there is one."""
    find = f"[...document.querySelectorAll({json.dumps(within + ' button')})].find(b => b.textContent === {json.dumps(label)} && !b.disabled)"
    await expect(page, find)
    await page.evaluate(f"{find}.click(); true")


async def type_line(page: Page, terminal: str, text: str) -> None:
    """Types `text` and Enter into the xterm.js terminal inside `terminal` (keyboard events)."""
    textarea = f"document.querySelector('{terminal} .xterm-helper-textarea')"
    await expect(page, textarea)
    await page.evaluate(f"{textarea}.focus(); true")
    await page.call("Input.insertText", {"text": text})
    for kind in ("keyDown", "keyUp"):
        await page.call(
            "Input.dispatchKeyEvent",
            {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13, **({"text": "\r"} if kind == "keyDown" else {})},
        )


def screen_text(terminal: str) -> str:
    """The terminal's whole buffer (the DOM renderer draws only what is on screen, and late)."""
    return f"(document.querySelector('{terminal}')?.terminalText?.() || '')"


async def sign_in_with_password(page: Page, tenant: Tenant) -> None:
    await expect(page, "document.getElementById('signin-password')")
    await fill(page, {"email": tenant.owner_email, "password": "wrong password"}, "signin-password")
    error = await expect(page, "document.getElementById('signin-error').textContent")
    assert "invalid email or password" in error
    await fill(page, {"email": tenant.owner_email, "password": PASSWORD}, "signin-password")
    await expect(page, "document.querySelector('main .view') && !document.getElementById('nav').hidden")
    assert tenant.owner_email in await page.evaluate("document.getElementById('who').textContent")


async def test_sign_in_create_a_sandbox_and_use_its_terminal(runtime_api: Api, owner: Tenant) -> None:
    base = str(runtime_api.client.base_url)
    async with console_browser(runtime_api) as browser:
        page = await browser.new_page(f"{base}/")
        await sign_in_with_password(page, owner)
        await expect(page, "document.querySelector('[data-view=sandboxes] #new-sandbox')")

        await fill(page, {"sandbox-name": "console-box"}, "new-sandbox")
        row = "document.querySelector('tr[data-name=\"console-box\"]')"
        await expect(page, f"{row} && {row}.querySelector('[data-status=running]')", timeout=30)
        sandbox_id = await page.evaluate(f"{row}.dataset.id")
        await click(page, f"tr[data-id='{sandbox_id}'] a")
        await expect(page, f"location.hash === '#/sandboxes/{sandbox_id}'")

        # The terminal: a command's output appears in the page; the directory carries over.
        await type_line(page, "#sandbox-terminal", "echo console-$((6*7))")
        await expect(page, f"{screen_text('#sandbox-terminal')}.includes('console-42')", timeout=60)
        await type_line(page, "#sandbox-terminal", "cd /tmp && touch made-in-console")
        await expect(page, f"{screen_text('#sandbox-terminal')}.includes('/tmp$')", timeout=60)
        await type_line(page, "#sandbox-terminal", "ls made-*; exit 3")
        await expect(page, f"{screen_text('#sandbox-terminal')}.includes('[exit 3]')", timeout=60)
        assert "made-in-console" in await page.evaluate(screen_text("#sandbox-terminal"))
        # Output shows as it is written, once: the first line long before the command ends.
        await type_line(page, "#sandbox-terminal", "echo first-live; sleep 4; echo second-live >&2; printf no-newline")
        await expect(page, f"{screen_text('#sandbox-terminal')}.split('\\n').some(l => l.trim() === 'first-live')", timeout=30)
        assert "second-live" not in (await page.evaluate(screen_text("#sandbox-terminal"))).replace("echo second-live", "")
        await expect(page, f"{screen_text('#sandbox-terminal')}.includes('no-newline')  && {screen_text('#sandbox-terminal')}.trimEnd().endsWith('/tmp$')", timeout=30)
        lines = [line.strip() for line in (await page.evaluate(screen_text("#sandbox-terminal"))).split("\n")]
        assert lines.count("first-live") == 1 and lines.count("second-live") == 1 and lines.count("no-newline") == 1, lines
        if SHOTS:
            (SHOTS / "sandbox-terminal.png").write_bytes(await page.screenshot())

        # A background process, its output followed live until it exits.
        await click(page, "button[data-tab=processes]")
        await expect(page, "document.getElementById('new-process')")
        await fill(page, {"process-cmd": "for i in 1 2 3; do echo tick-$i; sleep 0.3; done"}, "new-process")
        log = "document.getElementById('process-log').textContent"
        await expect(page, f"{log}.includes('tick-3') && {log}.includes('[exited, exit 0]')", timeout=60)
        assert await page.evaluate(f"{log}.indexOf('tick-1') < {log}.indexOf('tick-2')")
        await fill(page, {"process-cmd": "sleep 600", "process-name": "sleeper"}, "new-process")
        sleeper = "[...document.querySelectorAll('[data-tab=processes] tbody tr')].find(r => r.textContent.startsWith('sleeper'))"
        await expect(page, f"{sleeper}?.querySelector('[data-status=running]')", timeout=30)
        await click_button(page, "[data-tab=processes] tbody tr:first-child", "Kill")
        await expect(page, f"{sleeper}?.querySelector('[data-status=killed]')", timeout=30)

        # The sandbox's log stream is live: an exec made elsewhere shows up.
        await click(page, "button[data-tab=logs]")
        await expect(page, "document.getElementById('sandbox-log') && document.querySelector('[data-tab=logs] .muted').textContent === 'live'")
        await run(runtime_api, owner, sandbox_id, "echo from-the-api")
        await expect(page, "document.getElementById('sandbox-log').textContent.includes('from-the-api')", timeout=30)

        # Previews: exposing a port shows its URL.
        await click(page, "button[data-tab=previews]")
        await expect(page, "document.getElementById('expose-port')")
        await fill(page, {"expose-port-number": "8000"}, "expose-port")
        url = await expect(page, "document.querySelector('#exposed li[data-port=\"8000\"] code')?.textContent")
        assert url.startswith("http://8000-") and ".sandbox." in url
        await fill(page, {"share-port": "8000", "share-expiry": "600"}, "create-share")
        link = await expect(page, "document.querySelector('#new-share a')?.href")
        assert link.startswith(url) and "ms=ms_" in link
        rows = "document.querySelectorAll('[data-tab=previews] tbody tr')"
        await expect(page, f"{rows}.length === 1 && {rows}[0].textContent.includes('ms_')")
        await click_button(page, "[data-tab=previews] tbody", "Revoke")
        await expect(page, f"{rows}.length === 1 && {rows}[0].textContent === 'No share links.'")
        shares = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox_id}/shares", key=owner.key)
        assert shares.json()["data"] == []

        # Stop, start and delete from the sandbox's page (the confirmation answered yes).
        await click_button(page, "[data-view=sandboxes] .card .actions", "Stop")
        await expect(page, "document.querySelector('[data-view=sandboxes] .card [data-status=stopped]')", timeout=60)
        await click_button(page, "[data-view=sandboxes] .card .actions", "Start")
        await expect(page, "document.querySelector('[data-view=sandboxes] .card [data-status=running]')", timeout=60)
        await page.evaluate("window.confirm = () => true; true")
        await click_button(page, "[data-view=sandboxes] .card .actions", "Delete")
        await expect(page, "location.hash === '#/sandboxes' && document.querySelector('[data-view=sandboxes] p.muted')?.textContent === 'No sandboxes yet.'")
        gone = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox_id}", key=owner.key)
        assert gone.status_code == 404


def desktop_blue(png: bytes) -> tuple[int, int]:
    """(pixels of the desktop's background colour, all pixels) in a screenshot."""
    shot = Image.open(io.BytesIO(png)).convert("RGB")
    colours = shot.getcolors(maxcolors=1 << 22) or []
    blue = sum(count for count, rgb in colours if rgb == (0x30, 0x50, 0x6E))
    return blue, shot.width * shot.height


async def test_a_computer_provisions_then_shows_its_desktop_and_terminal(runtime_api: Api, owner: Tenant) -> None:
    base = str(runtime_api.client.base_url)
    async with console_browser(runtime_api) as browser:
        page = await browser.new_page(f"{base}/")
        await page.call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        await expect(page, "document.getElementById('signin-key')")
        await fill(page, {"api-key": owner.key}, "signin-key")
        await expect(page, "document.querySelector('[data-view=sandboxes]')")

        await page.evaluate("location.hash = '#/computers'; true")
        await expect(page, "document.getElementById('new-computer')")
        await fill(page, {"computer-name": "Console Desk", "computer-resolution": "800x600"}, "new-computer")
        first: Any = await expect(
            page,
            "(document.getElementById('computer-progress') && 'progress') || (document.getElementById('desktop-screen') && 'desktop')"
        )
        assert first == "progress"  # provisioning is shown while it lasts
        assert await page.evaluate("document.querySelector('#computer-progress [data-status=provisioning]') !== null")

        await expect(page, "document.getElementById('desktop-state')?.dataset.state === 'connected'", timeout=180)
        size = await page.evaluate("(() => { const c = document.querySelector('#desktop-screen canvas'); return [c.width, c.height]; })()")
        assert size == [800, 600]
        blue, total = 0, 1
        with trio.move_on_after(20):
            while True:  # the first frames arrive
                blue, total = desktop_blue(await page.screenshot())
                if blue > total // 10:
                    break
                await trio.sleep(0.3)
        assert blue > total // 10, f"the desktop's background is {blue} of {total} pixels"
        if SHOTS:
            (SHOTS / "desktop.png").write_bytes(await page.screenshot())

        await click(page, "button[data-tab=terminal]")
        await expect(page, "document.getElementById('computer-terminal')?.dataset.state === 'open'", timeout=60)
        await type_line(page, "#computer-terminal", "echo pty-$((7*6))")
        await expect(page, f"{screen_text('#computer-terminal')}.includes('pty-42')", timeout=60)
        # The shell exits: the session ends, and the page says so (after one try to reconnect).
        await type_line(page, "#computer-terminal", "exit")
        await expect(page, "document.getElementById('computer-terminal')?.dataset.state === 'closed'", timeout=30)
        assert "[connection closed]" in await page.evaluate(screen_text("#computer-terminal"))

        # Stop and start again: the page follows, and the desktop comes back.
        await click_button(page, "[data-view=computers] .card .actions", "Stop")
        await expect(page, "document.querySelector('[data-view=computers] .card [data-status=stopped]')", timeout=60)
        await click_button(page, "[data-view=computers] .card .actions", "Start")
        await expect(page, "document.getElementById('desktop-state')?.dataset.state === 'connected'", timeout=120)
        await page.evaluate("window.confirm = () => true; true")
        await click_button(page, "[data-view=computers] .card .actions", "Delete")
        await expect(page, "location.hash === '#/computers' && document.querySelector('[data-view=computers] p.muted')?.textContent === 'No computers yet.'")


async def test_credits_deployments_and_signing_out(api: Api, tenant: Tenant) -> None:
    """No instances needed: the credit balance, deployments (404 on a server without
    them is said plainly), a bad key refused, and signing out forgets the session."""
    base = str(api.client.base_url)
    async with console_browser(api) as browser:
        page = await browser.new_page(f"{base}/#/credits")
        await expect(page, "document.getElementById('signin-key')")
        await fill(page, {"api-key": "msk_u_not-a-key"}, "signin-key")
        assert "invalid" in (await expect(page, "document.getElementById('signin-error').textContent")).lower()
        await fill(page, {"api-key": tenant.key}, "signin-key")  # then the page asked for: credits
        assert await expect(page, "document.getElementById('balance-credits')?.textContent") == "100"
        await expect(page, "document.querySelector('[data-view=credits] tbody td:nth-child(2)')?.textContent === 'earn'")

        # Ids the tenant does not have (another tenant's look the same): the API's 404, shown.
        for kind in ("sandboxes", "computers"):
            await page.evaluate(f"location.hash = '#/{kind}/00000000-0000-4000-8000-000000000000'; true")
            shown = await expect(page, "document.querySelector('main .error-text')?.textContent")
            assert "not found" in shown.lower(), shown
        await page.evaluate("location.hash = '#/deployments'; true")
        listed = await expect(page, "(document.getElementById('deployments-unavailable') || document.getElementById('deployments-empty'))?.textContent")
        routes = (await api.client.get("/api/v1/openapi.json")).json()["paths"]
        if "/api/v1/deployments" in routes:
            assert listed == "No deployments yet: publish one from a sandbox."
        else:
            assert listed == "Deployments are not available on this server."

        await click(page, "#sign-out")
        await expect(page, "document.getElementById('signin-password')")
        assert await page.evaluate("sessionStorage.length") == 0

        # A password session whose access token is about to expire is refreshed first.
        await sign_in_with_password(page, tenant)
        session = "JSON.parse(sessionStorage.getItem('corral.console.session'))"
        first = await page.evaluate(session)
        assert first["kind"] == "jwt" and first["label"] == tenant.owner_email
        await page.evaluate(f"sessionStorage.setItem('corral.console.session', JSON.stringify({{...{session}, expires: Date.now()}})); true")
        await page.navigate(f"{base}/?again#/credits")  # a new document: the session is read again
        assert await expect(page, "document.getElementById('balance-credits')?.textContent") == "100"
        renewed = await page.evaluate(session)
        assert renewed["token"] != first["token"] and renewed["refresh"] != first["refresh"]
        assert renewed["expires"] > first["expires"]

        await click(page, "#sign-out")
        await expect(page, "document.getElementById('signin-password')")
        await page.navigate(f"{base}/?reloaded#/sandboxes")  # a new document stays signed out
        await expect(page, "document.getElementById('signin-key')")


async def test_deployments_show_their_versions_and_promote(runtime_api: Api, owner: Tenant) -> None:
    sandbox = (await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={"name": "site-src"})).json()["data"]
    created = await runtime_api.request("POST", f"/api/v1/projects/{owner.project_id}/deployments", key=owner.key, json={"name": "Console Site"})
    deployment = created.json()["data"]
    versions = []
    for text in ("one", "two"):
        await run(runtime_api, owner, sandbox["id"], f"echo {text} > /workspace/index.html")
        published = await runtime_api.request(
            "POST", f"/api/v1/deployments/{deployment['id']}/publish", key=owner.key, json={"source_sandbox_id": sandbox["id"]}, timeout=300
        )
        assert published.status_code == 200, published.text
        versions.append(published.json()["data"]["version"])
    async with console_browser(runtime_api) as browser:
        page = await browser.new_page(f"{runtime_api.client.base_url!s}/#/deployments")
        await expect(page, "document.getElementById('signin-key')")
        await fill(page, {"api-key": owner.key}, "signin-key")
        card = f"document.querySelector('#deployments .card[data-id=\"{deployment['id']}\"]')"
        await expect(page, f"{card}?.querySelectorAll('tbody tr[data-id]').length === 2", timeout=30)
        first = f"{card}.querySelector('tr[data-id=\"{versions[0]['id']}\"]')"
        second = f"{card}.querySelector('tr[data-id=\"{versions[1]['id']}\"]')"
        assert "(active)" in await page.evaluate(f"{second}.textContent")
        assert await page.evaluate(f"{first}.querySelector('[data-status]').dataset.status") == "archived"
        await click_button(page, f"#deployments .card[data-id='{deployment['id']}'] tr[data-id='{versions[0]['id']}']", "Promote")
        await expect(page, f"{card}?.querySelector('tr[data-id=\"{versions[0]['id']}\"]')?.textContent.includes('(active)')", timeout=30)
    got = await runtime_api.request("GET", f"/api/v1/deployments/{deployment['id']}", key=owner.key)
    assert got.json()["data"]["active_version_id"] == versions[0]["id"]


async def test_publishing_a_sandbox_shows_its_progress(runtime_api: Api, owner: Tenant) -> None:
    sandbox = (await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={"name": "pub-src"})).json()["data"]
    await run(runtime_api, owner, sandbox["id"], "mkdir -p /workspace/site && echo hello > /workspace/site/index.html")
    async with console_browser(runtime_api) as browser:
        page = await browser.new_page(f"{runtime_api.client.base_url!s}/#/deployments")
        await expect(page, "document.getElementById('signin-key')")
        await fill(page, {"api-key": owner.key}, "signin-key")
        await expect(page, f"document.querySelector('#publish-sandbox option[value=\"{sandbox['id']}\"]')", timeout=30)
        await fill(page, {"publish-sandbox": sandbox["id"], "publish-name": "Console Pub", "publish-output": "/workspace/site", "publish-build": "ls site"}, "publish")
        result = await expect(page, "document.getElementById('publish-result').textContent", timeout=120)
        assert result == "v1 is ready and serves production.", result
        steps = await page.evaluate("[...document.querySelectorAll('#publish-progress li')].map(li => li.textContent.split('  ')[1])")
        assert steps[0] == "created deployment Console Pub"
        assert "queued" in steps and "building: package" in steps, steps
        await expect(page, "[...document.querySelectorAll('#publish-progress li')].some(li => li.textContent.includes('completed: http'))", timeout=10)
        await expect(page, "[...document.querySelectorAll('#deployments .card h2')].some(h => h.textContent === 'Console Pub')", timeout=30)


@pytest.fixture
async def private_templates_api(runtime_host: None, tmp_path: Path) -> AsyncIterator[Api]:
    """A runtime server whose template directory is its own (the built-in templates linked
    in from the shared cache). A node sweeps, when it starts, every tenant template in its
    template directory that its own database does not know: with the shared cache,
    another test server starting meanwhile would delete the template this test builds."""
    private = tmp_path / "templates"
    private.mkdir()
    for name in ("default", "desktop"):
        (private / name).symlink_to(TEMPLATE_CACHE / name)
    async with running_server(tmp_path / "data", **{**RUNTIME_SETTINGS, "template_dir": private}) as api:
        try:
            yield api
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def test_a_template_builds_with_progress_and_makes_sandboxes(private_templates_api: Api) -> None:
    """A template with a setup command: its build's log and status followed live, then a
    sandbox made from it in the console has the file the setup wrote."""
    runtime_api = private_templates_api
    owner = await runtime_api.create_tenant()
    async with console_browser(runtime_api) as browser:
        page = await browser.new_page(f"{runtime_api.client.base_url!s}/#/templates")
        await expect(page, "document.getElementById('signin-key')")
        await fill(page, {"api-key": owner.key}, "signin-key")
        await expect(page, "document.querySelector('tr[data-name=\"default\"]')")
        await fill(page, {"template-name": "console-tpl", "template-setup": "echo made-by-template > /root/marker\necho step-two"}, "new-template")
        await expect(page, "document.querySelector('#build-status [data-status]')")
        await expect(page, "document.querySelector('#build-status [data-status=ready]')", timeout=180)
        log = await page.evaluate("document.getElementById('build-log').textContent")
        assert "$ echo made-by-template > /root/marker" in log and "step-two" in log, log
        if SHOTS:
            (SHOTS / "template-build.png").write_bytes(await page.screenshot())
        await expect(page, "document.querySelector('tr[data-name=\"console-tpl\"] [data-status=ready]')", timeout=30)

        await page.evaluate("location.hash = '#/sandboxes'; true")
        await expect(page, "document.querySelector('#sandbox-template option[value=\"console-tpl\"]')", timeout=30)
        await fill(page, {"sandbox-name": "from-tpl", "sandbox-template": "console-tpl"}, "new-sandbox")
        row = "document.querySelector('tr[data-name=\"from-tpl\"]')"
        await expect(page, f"{row}?.querySelector('[data-status=running]')", timeout=60)
        await click(page, "tr[data-name='from-tpl'] a")
        await type_line(page, "#sandbox-terminal", "cat /root/marker")
        await expect(page, f"{screen_text('#sandbox-terminal')}.includes('made-by-template')", timeout=60)
