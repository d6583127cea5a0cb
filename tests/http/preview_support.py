"""Helpers of the preview tests: a sandbox with the test app, and requests through the router."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.support import Api, Tenant

APP = (Path(__file__).parent / "preview_app.py").read_text()
API = "/api/v1"


async def new_sandbox(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    sandbox: dict[str, Any] = response.json()["data"]
    assert sandbox["status"] == "running", sandbox
    return sandbox


async def start_app(api: Api, tenant: Tenant, sandbox_id: str, port: int, bind: str = "0.0.0.0") -> None:
    """Upload the test app and run it as a background process of the sandbox."""
    wrote = await api.request(
        "POST", f"{API}/sandboxes/{sandbox_id}/files/write", key=tenant.key, json={"path": "/workspace/app.py", "content": APP}
    )
    assert wrote.status_code == 201, wrote.text
    started = await api.request(
        "POST", f"{API}/sandboxes/{sandbox_id}/processes", key=tenant.key, json={"cmd": f"python3 /workspace/app.py {port} {bind}"}
    )
    assert started.status_code == 201, started.text


async def expose(api: Api, tenant: Tenant, sandbox_id: str, port: int) -> str:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/expose", key=tenant.key, json={"port": port})
    assert response.status_code == 200, response.text
    url: str = response.json()["url"]
    return url


async def wait_ready(api: Api, sandbox_id: str, port: int, timeout: float = 20) -> dict[str, Any]:
    """The `sandbox.preview.ready` event of `port`, once published."""
    with trio.fail_after(timeout):
        while True:
            for event in await api.platform.events.list("sandbox", sandbox_id):
                if event.type == "sandbox.preview.ready" and event.data["port"] == port:
                    return event.data
            await trio.sleep(0.05)


async def preview_token(api: Api, tenant: Tenant, sandbox_id: str, **body: Any) -> str:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/preview-token", key=tenant.key, json=body)
    assert response.status_code == 200, response.text
    token: str = response.json()["data"]["token"]
    return token


async def share(api: Api, tenant: Tenant, sandbox_id: str, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/shares", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def host_of(url: str) -> str:
    """`http://8000-x.sandbox.corral.localhost:8081/?ms=...` -> `8000-x.sandbox.corral.localhost:8081`."""
    return url.split("://", 1)[1].split("/", 1)[0]


def router(api: Api) -> httpx.AsyncClient:
    """A client of the preview router; requests name their preview with the Host header."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.platform.settings.preview_port}", timeout=30)


def preview_host(sandbox: dict[str, Any], port: int, api: Api) -> str:
    return f"{port}-{sandbox['slug']}.sandbox.{api.platform.settings.public_domain}:{api.platform.settings.preview_port}"
