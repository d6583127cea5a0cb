"""Keys restricted to one workspace, on the sandboxes and the tenant-wide egress routes.

A platform key with `workspace_id` sees and creates sandboxes only in its workspace
(another workspace's sandbox is 404, naming another workspace on create is 403), and
is refused (403) on the routes that manage the whole tenant's egress vault, policies,
OAuth providers and audit.
"""

from __future__ import annotations

from typing import Any

from tests.support import API, Api, Tenant, assert_error, create_key


async def fenced_key(api: Api, tenant: Tenant) -> tuple[str, str]:
    response = await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Fenced"})
    assert response.status_code == 201, response.text
    workspace_id: str = response.json()["data"]["id"]
    key = await create_key(api, tenant.key, key_type="platform", workspace_id=workspace_id)
    return workspace_id, key["key"]


async def create_sandbox(api: Api, key: str, **body: Any) -> Any:
    return await api.request("POST", f"{API}/sandboxes", key=key, json={"name": "w", **body})


async def test_a_restricted_key_sees_and_makes_sandboxes_only_in_its_workspace(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    workspace_id, fenced = await fenced_key(api, owner)
    outside = await create_sandbox(api, owner.key)
    assert outside.status_code == 201, outside.text
    outside_id = outside.json()["data"]["id"]

    inside = await create_sandbox(api, fenced)
    assert inside.status_code == 201, inside.text
    inside_body = inside.json()["data"]
    assert inside_body["workspace_id"] == workspace_id
    inside_id = inside_body["id"]

    for refused in ({"workspace_id": owner.workspace_id}, {"workspace_slug": "elsewhere"}, {"workspace_name": "Elsewhere"}):
        assert_error(await create_sandbox(api, fenced, **refused), 403, "FORBIDDEN")
    assert (await create_sandbox(api, fenced, workspace_id=workspace_id)).status_code == 201

    for path in ("", "/env", "/processes", "/shares", "/network-policy"):
        assert_error(await api.request("GET", f"{API}/sandboxes/{outside_id}{path}", key=fenced), 404, "NOT_FOUND")
    assert_error(await api.request("DELETE", f"{API}/sandboxes/{outside_id}", key=fenced), 404, "NOT_FOUND")
    assert (await api.request("GET", f"{API}/sandboxes/{inside_id}", key=fenced)).status_code == 200

    rows = (await api.request("GET", f"{API}/sandboxes", key=fenced)).json()["data"]
    assert {row["workspace_id"] for row in rows} == {workspace_id}
    assert outside_id not in {row["id"] for row in rows}
    everything = (await api.request("GET", f"{API}/sandboxes", key=owner.key)).json()["data"]
    assert outside_id in {row["id"] for row in everything}


async def test_a_restricted_key_cannot_manage_the_tenants_egress(api: Api, tenant: Tenant) -> None:
    _, fenced = await fenced_key(api, tenant)
    for method, path, body in (
        ("GET", "/egress/secrets", None),
        ("POST", "/egress/secrets", {"name": "s", "value": "v", "scope": "tenant", "allowed_hosts": ["a.example"]}),
        ("GET", "/egress/bindings", None),
        ("GET", "/egress/policies", None),
        ("GET", "/egress/audit", None),
        ("GET", "/egress/oauth/providers", None),
    ):
        response = await api.request(method, f"{API}{path}", key=fenced, json=body)
        error = assert_error(response, 403, "FORBIDDEN")
        assert "restricted to one workspace" in error["message"]
    assert (await api.request("GET", f"{API}/egress/secrets", key=tenant.key)).status_code == 200
