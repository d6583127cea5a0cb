"""A real browser: a page opens the sandbox events stream with EventSource and a ticket."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.browser import open_browser
from tests.support import API, Api, Tenant, free_port

from .test_sandboxes import create, run

PAGE = """<!doctype html>
<html><body><h1>events</h1><script>
window.seen = [];
window.opened = false;
const source = new EventSource(%(url)s);
source.onopen = () => { window.opened = true; };
for (const type of ["sandbox.exec.started", "sandbox.exec.stdout", "sandbox.exec.completed"]) {
  source.addEventListener(type, (event) => {
    window.seen.push({type: event.type, id: event.lastEventId, data: JSON.parse(event.data)});
  });
}
</script></body></html>
"""


async def test_event_source_in_chromium_sees_exec_events(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    sandbox = await create(runtime_api, owner)
    minted = await runtime_api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)
    ticket = minted.json()["ticket"]
    stream_url = f"{runtime_api.client.base_url}{API}/sandboxes/{sandbox['id']}/events?ticket={ticket}"
    (tmp_path / "index.html").write_text(PAGE % {"url": json.dumps(stream_url)})
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with open_browser() as browser:
            page = await browser.new_page(f"http://localhost:{port}/index.html")  # another origin than the API
            await page.wait_for("window.opened")
            result = await run(runtime_api, owner, sandbox["id"], "echo hello-from-the-sandbox")
            seen = await page.wait_for("window.seen.length >= 3 && window.seen")
    finally:
        server.kill()
        server.wait()
    assert [event["type"] for event in seen] == ["sandbox.exec.started", "sandbox.exec.stdout", "sandbox.exec.completed"]
    assert seen[1]["data"] == {"exec_id": result["exec_id"], "line": "hello-from-the-sandbox"}
    assert all(len(event["id"]) == 26 for event in seen)
    # The ticket was single use: the browser's own reconnects would need a new one.
    again = await runtime_api.request("GET", f"{API}/sandboxes/{sandbox['id']}/events?ticket={ticket}")
    assert again.status_code == 401


