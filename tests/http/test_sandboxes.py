"""The sandbox API (contract §4) against real instances."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.ids import new_uuid
from tests.support import Api, Tenant


async def create(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", "/api/v1/sandboxes", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    sandbox: dict[str, Any] = response.json()["data"]
    return sandbox


async def run(api: Api, tenant: Tenant, sandbox_id: str, command: str, **extra: Any) -> dict[str, Any]:
    response = await api.request("POST", f"/api/v1/sandboxes/{sandbox_id}/exec", key=tenant.key, json={"command": command, **extra})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_create_returns_a_running_sandbox_with_its_record(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(
        runtime_api, owner, name="My App", size="small", metadata={"team": "a"}, external_user_id="end-user-1", auto_stop=600
    )
    assert sandbox["status"] == "running"
    assert set(sandbox) >= {
        "id", "tenant_id", "name", "slug", "template_id", "size", "status", "region", "auto_stop", "workspace_id",
        "project_id", "external_workspace_id", "external_user_id", "external_project_id", "metadata", "created_at", "updated_at",
    }
    assert sandbox["tenant_id"] == owner.id
    assert sandbox["template_id"] == "default"
    assert sandbox["workspace_id"] == owner.workspace_id and sandbox["project_id"] == owner.project_id
    assert sandbox["metadata"] == {"team": "a"} and sandbox["external_user_id"] == "end-user-1" and sandbox["auto_stop"] == 600
    slug = sandbox["slug"]
    assert slug.startswith("my-app-") and len(slug) <= 63 and slug == slug.lower()
    got = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox['id']}", key=owner.key)
    assert got.json()["data"]["id"] == sandbox["id"]
    events = await runtime_api.platform.events.list("sandbox", sandbox["id"])
    assert [e.type for e in events][:3] == ["sandbox.created", "sandbox.ready", "sandbox.started"]


async def test_create_validation(runtime_api: Api, owner: Tenant) -> None:
    unknown = await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={"template_id": "nope"})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "INVALID_TEMPLATE"
    bad = await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={"size": "huge", "env": {"A": 1}, "auto_stop": -1})
    assert bad.status_code == 422
    assert set(bad.json()["error"]["details"]) == {"size", "env", "auto_stop"}
    nul = await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={"env": {"TOKEN": "a\u0000b"}})
    assert nul.status_code == 422 and nul.json()["error"]["details"] == {"env": "TOKEN: a value must not contain NUL characters"}
    not_json = await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, content=b"{nope")
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "INVALID_BODY"


async def test_concurrent_limit(runtime_api: Api, owner: Tenant) -> None:
    await runtime_api.platform.db.execute("UPDATE tenants SET sandbox_limit = 1 WHERE id = ?", (owner.id,))
    first = await create(runtime_api, owner)
    refused = await runtime_api.request("POST", "/api/v1/sandboxes", key=owner.key, json={})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "SANDBOX_LIMIT_REACHED"
    await runtime_api.request("POST", f"/api/v1/sandboxes/{first['id']}/stop", key=owner.key)
    await create(runtime_api, owner)  # a stopped sandbox does not count


async def test_list_filters_and_total(runtime_api: Api, owner: Tenant) -> None:
    a = await create(runtime_api, owner, external_user_id="u1", workspace_slug="team-a")
    b = await create(runtime_api, owner, external_user_id="u2")
    everything = (await runtime_api.request("GET", "/api/v1/sandboxes", key=owner.key)).json()
    assert everything["total"] == 2 and {s["id"] for s in everything["data"]} == {a["id"], b["id"]}
    only_u1 = (await runtime_api.request("GET", "/api/v1/sandboxes?external_user_id=u1", key=owner.key)).json()
    assert [s["id"] for s in only_u1["data"]] == [a["id"]] and only_u1["total"] == 1
    by_workspace = (await runtime_api.request("GET", f"/api/v1/sandboxes?workspace_id={a['workspace_id']}", key=owner.key)).json()
    assert [s["id"] for s in by_workspace["data"]] == [a["id"]]
    assert a["workspace_id"] != owner.workspace_id


async def test_ids_and_absence(runtime_api: Api, owner: Tenant) -> None:
    bad = await runtime_api.request("GET", "/api/v1/sandboxes/sbx_123", key=owner.key)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_ID"
    missing = await runtime_api.request("GET", f"/api/v1/sandboxes/{new_uuid()}", key=owner.key)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    for action in ("stop", "start", "fork", "exec"):
        response = await runtime_api.request("POST", f"/api/v1/sandboxes/not-a-uuid/{action}", key=owner.key, json={})
        assert response.status_code == 400, action


async def test_exec_output_exit_code_env_and_cwd(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    result = await run(runtime_api, owner, sandbox["id"], "echo out; echo err >&2; exit 3")
    assert result["stdout"] == "out\n" and result["stderr"] == "err\n" and result["exit_code"] == 3
    assert result["exec_id"].startswith("exec_") and result["duration_ms"] >= 0
    result = await run(runtime_api, owner, sandbox["id"], "pwd; echo $GREETING", cwd="/tmp", env={"GREETING": "hello"})
    assert result["stdout"] == "/tmp\nhello\n"
    whoami = await run(runtime_api, owner, sandbox["id"], "id -u; python3 --version; for t in curl wget git vim jq htop tree zip unzip pip3; do command -v $t >/dev/null || echo missing $t; done")
    assert whoami["stdout"].startswith("0\nPython 3.")
    assert "missing" not in whoami["stdout"]
    events = await runtime_api.platform.events.list("sandbox", sandbox["id"])
    by_exec = [e for e in events if e.data.get("exec_id") == result["exec_id"]]
    assert [e.type for e in by_exec] == ["sandbox.exec.started", "sandbox.exec.stdout", "sandbox.exec.stdout", "sandbox.exec.completed"]
    assert [e.data.get("line") for e in by_exec[1:3]] == ["/tmp", "hello"]
    assert by_exec[-1].data["exit_code"] == 0


async def test_exec_timeout_kills_and_errors(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    result = await run(runtime_api, owner, sandbox["id"], "trap 'echo got TERM; exit 143' TERM; sleep 30 & wait", timeout=1)
    assert result["exit_code"] != 0 and result["timed_out"] is True
    assert "got TERM" in result["stdout"]
    assert result["duration_ms"] < 10_000
    missing = await runtime_api.request("POST", f"/api/v1/sandboxes/{sandbox['id']}/exec", key=owner.key, json={})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "MISSING_PARAM"
    bad = await runtime_api.request("POST", f"/api/v1/sandboxes/{sandbox['id']}/exec", key=owner.key, json={"command": "true", "timeout": -5})
    assert bad.status_code == 422


async def test_stop_start_keeps_files_and_refuses_wrong_states(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    await run(runtime_api, owner, sid, "echo kept > /workspace/note.txt; mkdir -p /root/deep && echo x > /root/deep/y")
    again = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/start", key=owner.key)
    assert again.status_code == 409 and again.json()["error"]["code"] == "INVALID_STATE"
    stopped = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/stop", key=owner.key)
    assert stopped.status_code == 200 and stopped.json()["data"]["status"] == "stopped"
    twice = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/stop", key=owner.key)
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "SANDBOX_NOT_RUNNING"
    refused = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/exec", key=owner.key, json={"command": "true"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "SANDBOX_NOT_RUNNING"
    files = await runtime_api.request("GET", f"/api/v1/sandboxes/{sid}/files", key=owner.key)
    assert files.status_code == 409 and files.json()["error"]["code"] == "SANDBOX_NOT_RUNNING"
    started = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/start", key=owner.key)
    assert started.status_code == 200 and started.json()["data"]["status"] == "running"
    result = await run(runtime_api, owner, sid, "cat /workspace/note.txt /root/deep/y")
    assert result["stdout"] == "kept\nx\n"


async def test_fork_copies_files_into_an_independent_sandbox(runtime_api: Api, owner: Tenant) -> None:
    source = await create(runtime_api, owner, name="origin", external_user_id="u9")
    await run(runtime_api, owner, source["id"], "echo original > /workspace/a.txt")
    response = await runtime_api.request("POST", f"/api/v1/sandboxes/{source['id']}/fork", key=owner.key)
    assert response.status_code == 201, response.text
    fork = response.json()["data"]
    assert fork["id"] != source["id"] and fork["status"] == "running" and fork["external_user_id"] == "u9"
    assert (await run(runtime_api, owner, fork["id"], "cat /workspace/a.txt"))["stdout"] == "original\n"
    await run(runtime_api, owner, fork["id"], "echo changed > /workspace/a.txt")
    assert (await run(runtime_api, owner, source["id"], "cat /workspace/a.txt"))["stdout"] == "original\n"


async def test_delete_removes_everything(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    instance_dir = Path(runtime_api.platform.settings.data_dir) / "instances" / sandbox["id"]
    assert instance_dir.exists()
    deleted = await runtime_api.request("DELETE", f"/api/v1/sandboxes/{sandbox['id']}", key=owner.key)
    assert deleted.status_code == 200 and deleted.json() == {"data": {"id": sandbox["id"], "deleted": True}}
    assert not instance_dir.exists()
    assert (await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox['id']}", key=owner.key)).status_code == 404
    assert (await runtime_api.request("DELETE", f"/api/v1/sandboxes/{sandbox['id']}", key=owner.key)).status_code == 404
    listing = (await runtime_api.request("GET", "/api/v1/sandboxes", key=owner.key)).json()
    assert listing["total"] == 0
    events = await runtime_api.platform.events.list("sandbox", sandbox["id"])
    assert events[-1].type == "sandbox.destroyed"


async def test_scopes_are_enforced(runtime_api: Api, owner: Tenant) -> None:
    made = await runtime_api.request("POST", "/api/v1/api-keys", key=owner.key, json={"name": "ro", "key_type": "user", "scopes": ["sandboxes:read"]})
    read_only = made.json()["data"]["key"]
    assert (await runtime_api.request("GET", "/api/v1/sandboxes", key=read_only)).status_code == 200
    refused = await runtime_api.request("POST", "/api/v1/sandboxes", key=read_only, json={})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
