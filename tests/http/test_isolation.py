"""Tenant isolation, table-driven from the route map.

For every tenant route with a resource id in its path, a resource is created in
tenant A and the route is called with tenant B's key: the answer must be 404 or 403,
and tenant A's resources must be intact afterwards. A new route whose path names a
resource this table cannot create fails the test, so new routes are covered the day
they are added.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from corral.http import create_app, routes_of
from tests.support import Api, Tenant

Params = dict[str, str]
Factory = Callable[[Api, Tenant, Params], Awaitable[Params]]


async def _workspace(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/workspaces", key=tenant.key, json={"name": "Isolated"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _project(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/projects", key=tenant.key, json={"name": "Isolated"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _api_key(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/api-keys", key=tenant.key, json={"name": "isolated", "key_type": "user"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _sandbox(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/sandboxes", key=tenant.key, json={"name": "isolated"})
    assert response.status_code == 201, response.text
    sandbox_id = response.json()["data"]["id"]
    wrote = await api.request(
        "POST", f"/api/v1/sandboxes/{sandbox_id}/files/write", key=tenant.key, json={"path": "/workspace/mine.txt", "content": "A"}
    )
    assert wrote.status_code == 201, wrote.text
    return {"id": sandbox_id}


FACTORIES: dict[str, Factory] = {
    "/sandboxes/{id}": _sandbox,
    "/workspaces/{id}": _workspace,
    "/projects/{id}": _project,
    "/api-keys/{id}": _api_key,
}
"""Route prefix up to a path parameter -> how to create that resource in a tenant."""

OWNER_CHECKS: dict[str, str] = {
    "/sandboxes/{id}": "/api/v1/sandboxes/{id}/files/stat?path=/workspace/mine.txt",
    "/workspaces/{id}": "/api/v1/workspaces/{id}",
    "/projects/{id}": "/api/v1/projects/{id}",
}


def _prefixes(path: str) -> list[str]:
    """`/a/{x}/b/{y}/c` -> [`/a/{x}`, `/a/{x}/b/{y}`]."""
    parts, found = path.split("/"), []
    for index, part in enumerate(parts):
        if part.startswith("{"):
            found.append("/".join(parts[: index + 1]))
    return found


async def test_other_tenants_resources_are_absent_on_every_route(runtime_api: Api) -> None:
    api = runtime_api
    tenant, other_tenant = await api.create_tenant(), await api.create_tenant("Other")
    routes = [r for r in routes_of(create_app(api.platform)) if r.path_params and r.auth not in ("admin", "public", "public_auth")]
    assert routes, "no tenant routes with path parameters"
    uncovered = sorted({p for r in routes for p in _prefixes(r.path) if p not in FACTORIES})
    assert not uncovered, f"add isolation factories for: {uncovered}"

    created: dict[str, Params] = {}
    checked = 0
    for route in routes:
        params: Params = {}
        for prefix in _prefixes(route.path):
            if prefix not in created:
                created[prefix] = await FACTORIES[prefix](api, tenant, dict(params))
            params.update(created[prefix])
        url = route.full_path.format(**params)
        kwargs = {"json": {}} if route.is_mutation else {}
        response = await api.request(route.method, url, key=other_tenant.key, **kwargs)
        assert response.status_code in (403, 404), f"{route.method} {route.path}: {response.status_code} {response.text}"
        assert response.json()["error"]["code"] in ("NOT_FOUND", "FORBIDDEN") or response.status_code == 404
        checked += 1
    assert checked == len(routes)

    for prefix, template in OWNER_CHECKS.items():
        response = await api.request("GET", template.format(**created[prefix]), key=tenant.key)
        assert response.status_code == 200, f"{template} was changed by another tenant: {response.text}"
    keys = await api.request("GET", "/api/v1/api-keys", key=tenant.key)
    statuses = {k["id"]: k["status"] for k in keys.json()["data"]}
    assert statuses[created["/api-keys/{id}"]["id"]] == "active"
