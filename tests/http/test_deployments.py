"""Deployments without instances (contract §12): create, list, get, patch, delete,
scopes, errors, versions pagination bounds, idempotent create, tenant isolation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.pg_server import create_database
from tests.support import API, Api, Tenant, assert_error, create_key, running_server


async def new_deployment(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "My Site")
    response = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_create_answers_the_record(api: Api, tenant: Tenant) -> None:
    created = await new_deployment(api, tenant, name="Shop Front", metadata={"team": "a"}, external_user_id="u1", auto_deploy=True)
    assert created["id"].startswith("dep_") and len(created["id"]) == 30
    assert created["state"] == "created"
    assert created["name"] == "Shop Front"
    assert created["slug"].startswith("shop-front-")
    assert created["workspace_id"] == tenant.workspace_id and created["project_id"] == tenant.project_id
    assert created["active_version_id"] is None
    assert created["source_type"] == "sandbox"
    assert created["auto_deploy"] is True
    assert created["metadata"] == {"team": "a"}
    assert created["external_user_id"] == "u1"
    domain, port = api.platform.settings.public_domain, api.platform.settings.preview_port
    assert created["public_url"] == f"http://{created['slug']}.{domain}:{port}"
    got = await api.request("GET", f"{API}/deployments/{created['id']}", key=tenant.key)
    assert got.status_code == 200
    assert got.json()["data"] == created


async def test_create_errors(api: Api, tenant: Tenant) -> None:
    url = f"{API}/projects/{tenant.project_id}/deployments"
    missing = await api.request("POST", url, key=tenant.key, json={})
    assert assert_error(missing, 400, "MISSING_PARAM")["message"] == "name is required"
    too_long = await api.request("POST", url, key=tenant.key, json={"name": "x" * 101})
    assert_error(too_long, 422, "VALIDATION_ERROR")
    at_max = await api.request("POST", url, key=tenant.key, json={"name": "x" * 100})
    assert at_max.status_code == 201
    wrong_type = await api.request("POST", url, key=tenant.key, json={"name": "a", "source_type": "git"})
    assert_error(wrong_type, 422, "VALIDATION_ERROR")
    not_json = await api.request("POST", url, key=tenant.key, content=b"{nope", headers={"Content-Type": "application/json"})
    assert_error(not_json, 400, "INVALID_BODY")
    unknown_project = await api.request(
        "POST", f"{API}/projects/00000000-0000-4000-8000-000000000000/deployments", key=tenant.key, json={"name": "a"}
    )
    assert_error(unknown_project, 404, "NOT_FOUND")
    bad_id = await api.request("POST", f"{API}/projects/nope/deployments", key=tenant.key, json={"name": "a"})
    assert_error(bad_id, 400, "INVALID_ID")


async def test_list_filters(api: Api, tenant: Tenant) -> None:
    a = await new_deployment(api, tenant, name="a", external_user_id="u1", external_workspace_id="w1")
    b = await new_deployment(api, tenant, name="b", external_user_id="u2")
    everything = (await api.request("GET", f"{API}/deployments", key=tenant.key)).json()
    assert [d["id"] for d in everything["data"]] == [b["id"], a["id"]]
    assert everything["total"] == 2
    only = (await api.request("GET", f"{API}/deployments?external_user_id=u1", key=tenant.key)).json()["data"]
    assert [d["id"] for d in only] == [a["id"]]
    by_ws = (await api.request("GET", f"{API}/deployments?external_workspace_id=w1", key=tenant.key)).json()["data"]
    assert [d["id"] for d in by_ws] == [a["id"]]
    by_project = (await api.request("GET", f"{API}/deployments?project_id={tenant.project_id}", key=tenant.key)).json()["data"]
    assert len(by_project) == 2
    created = (await api.request("GET", f"{API}/deployments?state=created", key=tenant.key)).json()["data"]
    assert len(created) == 2
    await api.request("DELETE", f"{API}/deployments/{a['id']}", key=tenant.key)
    live = (await api.request("GET", f"{API}/deployments", key=tenant.key)).json()["data"]
    assert [d["id"] for d in live] == [b["id"]]
    deleted = (await api.request("GET", f"{API}/deployments?state=deleted", key=tenant.key)).json()["data"]
    assert [d["id"] for d in deleted] == [a["id"]]


async def test_patch(api: Api, tenant: Tenant) -> None:
    created = await new_deployment(api, tenant, metadata={"a": 1})
    url = f"{API}/deployments/{created['id']}"
    patched = await api.request("PATCH", url, key=tenant.key, json={"name": "Renamed", "auto_deploy": True, "external_project_id": "p9"})
    assert patched.status_code == 200, patched.text
    body = patched.json()["data"]
    assert body["name"] == "Renamed" and body["auto_deploy"] is True and body["external_project_id"] == "p9"
    assert body["metadata"] == {"a": 1} and body["slug"] == created["slug"]
    metadata = await api.request("PATCH", url, key=tenant.key, json={"metadata": {"b": 2}})
    assert metadata.json()["data"]["metadata"] == {"b": 2}
    bad = await api.request("PATCH", url, key=tenant.key, json={"name": "", "auto_deploy": "yes"})
    assert_error(bad, 422, "VALIDATION_ERROR")


async def test_a_copy_whose_home_moved_writes_nothing_and_the_next_request_takes_the_home_back(api: Api, tenant: Tenant) -> None:
    """One home per deployment (issue 30): the actor's state writes are fenced by the
    row's `node`. Another node that took the home (written here straight into the row,
    as its compare-and-set would) makes this node's live copy refuse its write (503,
    nothing written, the copy stopped); the next request activates the actor afresh,
    which moves the home back to this node (no such node lives: nothing is running it)."""
    here = api.platform.settings.node_name
    created = await new_deployment(api, tenant, name="Homed")
    assert created["node"] == here
    url = f"{API}/deployments/{created['id']}"
    assert (await api.request("PATCH", url, key=tenant.key, json={"name": "First"})).status_code == 200
    await api.platform.db.execute("UPDATE deployments SET node = 'node-elsewhere' WHERE id = ?", (created["id"],))
    stale = await api.request("PATCH", url, key=tenant.key, json={"name": "Lost write"})
    assert assert_error(stale, 503, "SERVICE_UNAVAILABLE")["message"] == "this deployment moved to node node-elsewhere meanwhile; try again"
    row = await api.platform.db.fetch_one("SELECT name, node FROM deployments WHERE id = ?", (created["id"],))
    assert row == {"name": "First", "node": "node-elsewhere"}
    again = await api.request("PATCH", url, key=tenant.key, json={"name": "Second"})
    assert again.status_code == 200, again.text
    assert (again.json()["data"]["name"], again.json()["data"]["node"]) == ("Second", here)


async def test_delete(api: Api, tenant: Tenant) -> None:
    created = await new_deployment(api, tenant)
    url = f"{API}/deployments/{created['id']}"
    deleted = await api.request("DELETE", url, key=tenant.key)
    assert deleted.status_code == 200
    assert deleted.json() == {"data": {"id": created["id"], "state": "deleted"}}
    assert_error(await api.request("GET", url, key=tenant.key), 404, "DEPLOYMENT_NOT_FOUND")
    assert_error(await api.request("DELETE", url, key=tenant.key), 404, "DEPLOYMENT_NOT_FOUND")
    assert_error(await api.request("PATCH", url, key=tenant.key, json={"name": "x"}), 404, "DEPLOYMENT_NOT_FOUND")


async def test_unknown_ids(api: Api, tenant: Tenant) -> None:
    for path in ("/deployments/nope", "/deployments/dep_01jzzzzzzzzzzzzzzzzzzzzzzz"):
        assert_error(await api.request("GET", f"{API}{path}", key=tenant.key), 404, "DEPLOYMENT_NOT_FOUND")
    created = await new_deployment(api, tenant)
    version = await api.request("GET", f"{API}/deployments/{created['id']}/versions/ver_01jzzzzzzzzzzzzzzzzzzzzzzz", key=tenant.key)
    assert_error(version, 404, "VERSION_NOT_FOUND")
    promote = await api.request("POST", f"{API}/deployments/{created['id']}/versions/nope/promote", key=tenant.key)
    assert_error(promote, 404, "VERSION_NOT_FOUND")
    rollback = await api.request("POST", f"{API}/deployments/{created['id']}/rollback", key=tenant.key, json={"version_id": "ver_x"})
    assert_error(rollback, 404, "VERSION_NOT_FOUND")
    missing = await api.request("POST", f"{API}/deployments/{created['id']}/rollback", key=tenant.key, json={})
    assert_error(missing, 400, "MISSING_PARAM")
    logs = await api.request("GET", f"{API}/deployments/{created['id']}/services/svc_nope/logs", key=tenant.key)
    assert_error(logs, 404, "NOT_FOUND")


async def test_versions_list_bounds(api: Api, tenant: Tenant) -> None:
    created = await new_deployment(api, tenant)
    url = f"{API}/deployments/{created['id']}/versions"
    empty = await api.request("GET", url, key=tenant.key)
    assert empty.json() == {"data": [], "next_cursor": None}
    for limit in (1, 20, 100):
        assert (await api.request("GET", f"{url}?limit={limit}", key=tenant.key)).status_code == 200
    for limit in (0, 101, "x"):
        assert_error(await api.request("GET", f"{url}?limit={limit}", key=tenant.key), 400, "INVALID_PARAM")


async def test_scopes(api: Api, tenant: Tenant) -> None:
    created = await new_deployment(api, tenant)
    reader = (await create_key(api, tenant.key, scopes=["deployments:read"]))["key"]
    writer = (await create_key(api, tenant.key, scopes=["deployments:write"]))["key"]
    other = (await create_key(api, tenant.key, scopes=["sandboxes:read"]))["key"]
    assert (await api.request("GET", f"{API}/deployments", key=reader)).status_code == 200
    assert (await api.request("GET", f"{API}/deployments/{created['id']}/versions", key=reader)).status_code == 200
    refused = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=reader, json={"name": "a"})
    assert_error(refused, 403, "insufficient_scope")
    assert_error(await api.request("DELETE", f"{API}/deployments/{created['id']}", key=reader), 403, "insufficient_scope")
    ok = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=writer, json={"name": "a"})
    assert ok.status_code == 201
    assert_error(await api.request("GET", f"{API}/deployments", key=other), 403, "insufficient_scope")


async def test_create_is_idempotent(api: Api, tenant: Tenant) -> None:
    url = f"{API}/projects/{tenant.project_id}/deployments"
    headers = {"Idempotency-Key": "create-1"}
    first = await api.request("POST", url, key=tenant.key, json={"name": "once"}, headers=headers)
    again = await api.request("POST", url, key=tenant.key, json={"name": "once"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    listed = (await api.request("GET", f"{API}/deployments", key=tenant.key)).json()["data"]
    assert len(listed) == 1
    reused = await api.request("POST", url, key=tenant.key, json={"name": "other"}, headers=headers)
    assert_error(reused, 422, "IDEMPOTENCY_KEY_REUSED")


async def test_another_tenant_gets_404_everywhere(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    created = await new_deployment(api, tenant)
    dep = f"{API}/deployments/{created['id']}"
    key = other_tenant.key
    checks = [
        ("GET", dep, None), ("PATCH", dep, {"name": "x"}), ("DELETE", dep, None),
        ("POST", f"{dep}/publish", {"source_sandbox_id": "00000000-0000-4000-8000-000000000000"}),
        ("POST", f"{dep}/rollback", {"version_id": "ver_x"}),
        ("GET", f"{dep}/versions", None), ("GET", f"{dep}/versions/ver_x", None),
        ("POST", f"{dep}/versions/ver_x/promote", None), ("GET", f"{dep}/services/svc_x/logs", None),
        ("GET", f"{dep}/events", None),
    ]
    for method, url, body in checks:
        response = await api.request(method, url, key=key, json=body)
        assert_error(response, 404, "DEPLOYMENT_NOT_FOUND")
    foreign_project = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=key, json={"name": "a"})
    assert_error(foreign_project, 404, "NOT_FOUND")
    assert (await api.request("GET", f"{API}/deployments", key=key)).json()["data"] == []
    still = await api.request("GET", dep, key=tenant.key)
    assert still.status_code == 200 and still.json()["data"]["name"] == created["name"]


async def test_a_key_restricted_to_a_workspace_sees_only_its_deployments(api: Api, tenant: Tenant) -> None:
    made = await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Fenced"})
    assert made.status_code == 201, made.text
    workspace_id = made.json()["data"]["id"]
    fenced = (await create_key(api, tenant.key, key_type="platform", workspace_id=workspace_id))["key"]
    projects = (await api.request("GET", f"{API}/projects?workspace_id={workspace_id}", key=tenant.key)).json()["data"]
    inside_project = projects[0]["id"]
    outside = await new_deployment(api, tenant, name="outside")
    refused = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=fenced, json={"name": "x"})
    assert_error(refused, 404, "NOT_FOUND")
    inside = await api.request("POST", f"{API}/projects/{inside_project}/deployments", key=fenced, json={"name": "inside"})
    assert inside.status_code == 201, inside.text
    assert inside.json()["data"]["workspace_id"] == workspace_id
    listed = (await api.request("GET", f"{API}/deployments", key=fenced)).json()["data"]
    assert [d["id"] for d in listed] == [inside.json()["data"]["id"]]
    for method, path in (("GET", ""), ("GET", "/versions"), ("DELETE", "")):
        assert_error(await api.request(method, f"{API}/deployments/{outside['id']}{path}", key=fenced), 404, "DEPLOYMENT_NOT_FOUND")
    assert (await api.request("GET", f"{API}/deployments/{outside['id']}", key=tenant.key)).status_code == 200


async def test_the_same_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    url = create_database(postgres_url, "deployments_pg")
    async with running_server(tmp_path / "pg", url) as api:
        tenant = await api.create_tenant()
        created = await new_deployment(api, tenant, metadata={"k": "v"}, auto_deploy=True)
        assert created["auto_deploy"] is True and created["metadata"] == {"k": "v"}
        patched = await api.request("PATCH", f"{API}/deployments/{created['id']}", key=tenant.key, json={"auto_deploy": False})
        assert patched.json()["data"]["auto_deploy"] is False
        versions = await api.request("GET", f"{API}/deployments/{created['id']}/versions?state=ready&limit=5", key=tenant.key)
        assert versions.json() == {"data": [], "next_cursor": None}
        assert (await api.request("DELETE", f"{API}/deployments/{created['id']}", key=tenant.key)).status_code == 200
        deleted = (await api.request("GET", f"{API}/deployments?state=deleted", key=tenant.key)).json()["data"]
        assert [d["id"] for d in deleted] == [created["id"]]
