"""Helpers of the deployment tests: sandboxes with files, publishes, requests through the router."""

from __future__ import annotations

from typing import Any

import httpx

from tests.http.preview_support import new_sandbox, router
from tests.support import API, Api, Tenant

__all__ = ["deployment", "exec_in", "get_site", "new_sandbox", "publish", "router", "site_host"]


async def exec_in(api: Api, tenant: Tenant, sandbox_id: str, command: str) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/exec", key=tenant.key, json={"command": command, "timeout": 120})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert result["exit_code"] == 0, result
    return result


async def deployment(api: Api, tenant: Tenant, name: str = "site") -> dict[str, Any]:
    response = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=tenant.key, json={"name": name})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def publish(api: Api, tenant: Tenant, deployment_id: str, sandbox_id: str, **body: Any) -> httpx.Response:
    body = {"source_sandbox_id": sandbox_id, **body}
    return await api.request("POST", f"{API}/deployments/{deployment_id}/publish", key=tenant.key, json=body, timeout=300)


def site_host(api: Api, slug: str, version: int | None = None) -> str:
    label = slug if version is None else f"v{version}-{slug}"
    return f"{label}.{api.platform.settings.public_domain}:{api.platform.settings.preview_port}"


async def get_site(api: Api, slug: str, path: str = "/", version: int | None = None, **headers: str) -> httpx.Response:
    async with router(api) as client:
        return await client.get(path, headers={"Host": site_host(api, slug, version), **headers})
