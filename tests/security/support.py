"""What the hostile-tenant tests do through the API again and again."""

from __future__ import annotations

from typing import Any

from tests.support import API, Api, Tenant


async def create(api: Api, tenant: Tenant, **body: Any) -> str:
    """A new running sandbox of `tenant`: its id."""
    response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["data"]["id"]
    return sandbox_id


async def run(api: Api, tenant: Tenant, sandbox_id: str, command: str, timeout: int = 60) -> dict[str, Any]:
    """`command` through `POST /sandboxes/{id}/exec`: its answer."""
    response = await api.request(
        "POST", f"{API}/sandboxes/{sandbox_id}/exec", key=tenant.key, json={"command": command, "timeout": timeout},
        timeout=timeout + 60,
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result
