"""The computer resource through HTTP: create (every body field), list, get, patch,
delete, credits, profiles, apps, scopes; a real instance behind every computer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.computers import AgentRuntimeProfile
from corral.ids import new_uuid
from corral.node import Platform
from tests.http.computer_support import (
    API,
    call,
    create,
    create_running,
    events_until,
    run,
    wait_for,
)
from tests.support import Api, Tenant, assert_error, member_key

FULL_FIELDS = {
    "id", "tenant_id", "owner_user_id", "name", "slug", "template_type", "size", "vcpus", "memory_mb", "status",
    "vm_id", "workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id",
    "sandbox_url", "desktop_url", "selected_apps", "settings", "ai_config", "agent_session_id", "agent_status",
    "resolution", "auto_stop", "region", "node", "created_at", "updated_at",
}


async def set_balance(api: Api, tenant: Tenant, balance: int) -> None:
    """Move the tenant's balance (a new tenant has the default 100 credits) to `balance`."""
    current = await api.request("GET", f"{API}/credits/balance", key=tenant.key)
    delta = balance - int(current.json()["balance_credits"])
    response = await api.admin("POST", f"{API}/admin/tenants/{tenant.id}/credits", json={"amount_credits": delta, "description": "test"})
    assert response.status_code == 201, response.text


async def test_create_answers_provisioning_then_runs_with_every_field(runtime_api: Api, owner: Tenant) -> None:
    created = await create(
        runtime_api, owner, name="Design Box", size="large", external_user_id="end-user-1",
        external_workspace_id="ext-ws", external_project_id="ext-proj",
    )
    assert set(created) == FULL_FIELDS
    assert created["status"] == "provisioning" and created["vm_id"] is None
    assert created["tenant_id"] == owner.id and created["owner_user_id"] == owner.owner_id
    assert created["template_type"] == "svc-desktop" and created["name"] == "Design Box"
    assert (created["size"], created["vcpus"], created["memory_mb"]) == ("large", 4, 16384)
    assert created["workspace_id"] == owner.workspace_id and created["project_id"] == owner.project_id
    assert (created["external_user_id"], created["external_workspace_id"], created["external_project_id"]) == ("end-user-1", "ext-ws", "ext-proj")
    assert created["selected_apps"] == [] and created["settings"] == {} and created["ai_config"] == {}
    assert created["agent_session_id"] is None and created["agent_status"] is None
    assert created["auto_stop"] == 0 and created["region"] == "local" and created["resolution"] == "1280x800"
    assert created["node"] == runtime_api.platform.settings.node_name  # contract §20
    slug = created["slug"]
    assert slug.startswith("design-box-") and len(slug) <= 63
    port = runtime_api.platform.settings.preview_port  # the preview router serves the desktop
    assert created["desktop_url"] == created["sandbox_url"] == f"http://{slug}.corral.localhost:{port}/"

    running = await wait_for(runtime_api, owner, created["id"], "running")
    assert running["vm_id"] and running["vm_id"].startswith("vm-")
    events = await events_until(runtime_api, created["id"], "computer.started")
    assert [e.type for e in events] == ["computer.created", "computer.running", "computer.started"]
    assert events[1].data == {"computer_id": created["id"], "vm_id": running["vm_id"]}
    assert events[2].data == {"computer_id": created["id"], "region": "local"}
    assert all(e.tenant_id == owner.id for e in events)
    result = await run(runtime_api, owner, created["id"], "hostname; id -u")
    assert result == {"output": f"{slug}\n0\n", "exit_code": 0}


async def test_name_and_template_type_are_required(runtime_api: Api, owner: Tenant) -> None:
    for body, missing in (
        ({"template_type": "svc-desktop"}, {"name"}),
        ({"name": "x"}, {"template_type"}),
        ({"name": "", "template_type": "svc-desktop"}, {"name"}),
        ({}, {"name", "template_type"}),
    ):
        response = await runtime_api.request("POST", f"{API}/computers", key=owner.key, json=body)
        error = assert_error(response, 400, "MISSING_PARAM")
        assert error["message"] == "name is required"
        assert set(error["details"]) == missing


async def test_create_validation(runtime_api: Api, owner: Tenant) -> None:
    async def post(body: Any, **kwargs: Any) -> Any:
        return await runtime_api.request("POST", f"{API}/computers", key=owner.key, json=body, **kwargs)

    bad = await post({"name": 5, "template_type": "svc-desktop", "size": "xl", "selected_apps": "nodejs"})
    assert set(assert_error(bad, 422, "VALIDATION_ERROR")["details"]) == {"name", "size", "selected_apps"}
    unknown_app = await post({"name": "a", "template_type": "svc-desktop", "selected_apps": ["nodejs", "not-an-app"]})
    assert "not-an-app" in assert_error(unknown_app, 422, "VALIDATION_ERROR")["details"]["selected_apps"]
    unknown_template = await post({"name": "a", "template_type": "windows-11"})
    assert_error(unknown_template, 400, "INVALID_TEMPLATE")
    bad_workspace = await post({"name": "a", "template_type": "svc-desktop", "workspace_id": new_uuid()})
    assert_error(bad_workspace, 422, "VALIDATION_ERROR")
    not_json = await runtime_api.request("POST", f"{API}/computers", key=owner.key, content=b"{nope")
    assert_error(not_json, 400, "INVALID_BODY")
    operator = await runtime_api.admin("POST", f"{API}/computers", json={"name": "a", "template_type": "svc-desktop"})
    assert_error(operator, 422, "TENANT_RESOLUTION_FAILED")
    assert (await runtime_api.request("GET", f"{API}/computers", key=owner.key)).json()["total"] == 0


async def test_insufficient_credits_on_create_and_start(runtime_api: Api, owner: Tenant) -> None:
    await set_balance(runtime_api, owner, 5)
    refused = await runtime_api.request("POST", f"{API}/computers", key=owner.key, json={"name": "m", "template_type": "svc-desktop", "size": "medium"})
    assert_error(refused, 402, "INSUFFICIENT_CREDITS")
    assert (await runtime_api.request("GET", f"{API}/computers", key=owner.key)).json()["total"] == 0
    small = await create_running(runtime_api, owner, size="small")  # 3 credits an hour: covered
    stopped = await call(runtime_api, owner, "POST", small["id"], "/stop")
    assert stopped.status_code == 200
    await set_balance(runtime_api, owner, 2)
    start = await call(runtime_api, owner, "POST", small["id"], "/start")
    assert_error(start, 402, "INSUFFICIENT_CREDITS")
    assert (await call(runtime_api, owner, "GET", small["id"])).json()["status"] == "stopped"
    await set_balance(runtime_api, owner, 50)
    assert (await call(runtime_api, owner, "POST", small["id"], "/start")).json()["status"] == "running"


async def test_list_filters_summaries_and_total(runtime_api: Api, owner: Tenant) -> None:
    a = await create(runtime_api, owner, name="a", external_user_id="u1", external_workspace_id="w1", workspace_slug="team-a")
    b = await create(runtime_api, owner, name="b", external_user_id="u2", external_project_id="p2", project_slug="proj-b")
    everything = (await runtime_api.request("GET", f"{API}/computers", key=owner.key)).json()
    assert set(everything) == {"computers", "total"} and everything["total"] == 2
    assert {c["id"] for c in everything["computers"]} == {a["id"], b["id"]}
    assert all(set(c) == {"id", "name", "status", "size", "created_at"} for c in everything["computers"])

    async def ids(query: str) -> list[str]:
        body = (await runtime_api.request("GET", f"{API}/computers?{query}", key=owner.key)).json()
        assert body["total"] == len(body["computers"])
        return [c["id"] for c in body["computers"]]

    assert a["workspace_id"] != owner.workspace_id and b["project_id"] != owner.project_id
    assert await ids(f"workspace_id={a['workspace_id']}") == [a["id"]]
    assert await ids(f"project_id={b['project_id']}") == [b["id"]]
    assert await ids("external_user_id=u1") == [a["id"]]
    assert await ids("external_workspace_id=w1") == [a["id"]]
    assert await ids("external_project_id=p2") == [b["id"]]
    assert await ids("external_user_id=nobody") == []
    other = await runtime_api.create_tenant("Other")
    assert (await runtime_api.request("GET", f"{API}/computers", key=other.key)).json() == {"computers": [], "total": 0}


async def test_invalid_and_unknown_ids(runtime_api: Api, owner: Tenant) -> None:
    for method, suffix in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/start"), ("POST", "/exec"), ("GET", "/files")):
        bad = await runtime_api.request(method, f"{API}/computers/not-a-uuid{suffix}", key=owner.key, json={})
        assert assert_error(bad, 400, "INVALID_ID")["message"] == "invalid computer id"
        missing = await runtime_api.request(method, f"{API}/computers/{new_uuid()}{suffix}", key=owner.key, json={})
        assert assert_error(missing, 404, "COMPUTER_NOT_FOUND")["message"] == "computer not found"


async def test_patch_changes_only_agent_session_id(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    patched = await call(runtime_api, owner, "PATCH", computer["id"], json={"agent_session_id": "sess-42"})
    assert patched.status_code == 200 and patched.json()["agent_session_id"] == "sess-42"
    assert patched.json()["updated_at"] > computer["updated_at"]
    assert (await call(runtime_api, owner, "GET", computer["id"])).json()["agent_session_id"] == "sess-42"
    cleared = await call(runtime_api, owner, "PATCH", computer["id"], json={"agent_session_id": None})
    assert cleared.json()["agent_session_id"] is None
    refused = await call(runtime_api, owner, "PATCH", computer["id"], json={"agent_session_id": "x", "name": "renamed", "size": "large"})
    assert set(assert_error(refused, 422, "VALIDATION_ERROR")["details"]) == {"name", "size"}
    assert_error(await call(runtime_api, owner, "PATCH", computer["id"], json={}), 400, "MISSING_PARAM")
    assert_error(await call(runtime_api, owner, "PATCH", computer["id"], json={"agent_session_id": 7}), 422, "VALIDATION_ERROR")
    assert (await call(runtime_api, owner, "GET", computer["id"])).json()["name"] == computer["name"]


async def test_delete_destroys_the_instance_and_needs_membership(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner, workspace_slug="private-team")
    _, outsider = await member_key(runtime_api, owner, "member")  # a tenant member, not in private-team
    refused = await runtime_api.request("DELETE", f"{API}/computers/{computer['id']}", key=outsider)
    assert assert_error(refused, 403, "FORBIDDEN")["message"] == "not a member of this computer"
    for suffix in ("/stop", "/exec"):
        assert (await runtime_api.request("POST", f"{API}/computers/{computer['id']}{suffix}", key=outsider, json={"command": "true"})).status_code == 403
    assert (await runtime_api.request("GET", f"{API}/computers/{computer['id']}", key=outsider)).status_code == 200

    deleted = await call(runtime_api, owner, "DELETE", computer["id"])
    assert deleted.status_code == 200 and deleted.json() == {"id": computer["id"], "deleted": True}
    driver = await runtime_api.platform.runtime.driver()
    assert computer["vm_id"] not in {info.id for info in await driver.instances()}
    assert await runtime_api.platform.db.fetch_one("SELECT 1 FROM computers WHERE id = ?", (computer["id"],)) is None
    again = await call(runtime_api, owner, "DELETE", computer["id"])
    assert_error(again, 404, "COMPUTER_NOT_FOUND")
    events = await runtime_api.platform.events.list("computer", computer["id"])
    assert events[-1].type == "computer.deleted" and events[-1].data == {"computer_id": computer["id"]}


async def test_a_member_of_the_workspace_may_delete(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)  # the default workspace, where members are members
    _, member = await member_key(runtime_api, owner, "member")
    deleted = await runtime_api.request("DELETE", f"{API}/computers/{computer['id']}", key=member)
    assert deleted.status_code == 200, deleted.text


async def test_scopes(runtime_api: Api, owner: Tenant) -> None:
    computer = await create(runtime_api, owner)
    made = await runtime_api.request("POST", f"{API}/api-keys", key=owner.key, json={"name": "ro", "key_type": "user", "scopes": ["computers:read"]})
    read_only = made.json()["data"]["key"]
    assert (await runtime_api.request("GET", f"{API}/computers/{computer['id']}", key=read_only)).status_code == 200
    for method, path in (("POST", "/computers"), ("DELETE", f"/computers/{computer['id']}"), ("POST", f"/computers/{computer['id']}/exec")):
        assert_error(await runtime_api.request(method, f"{API}{path}", key=read_only, json={}), 403, "insufficient_scope")


@dataclass
class Profiles:
    """A stand-in for the agent-runs part's profile store (the interface computers use)."""

    profiles: dict[str, AgentRuntimeProfile] = field(default_factory=dict)
    default: AgentRuntimeProfile | None = None

    async def find(self, platform: Platform, tenant_id: str, profile_id: str) -> AgentRuntimeProfile | None:
        return self.profiles.get(profile_id)

    async def default_for(self, platform: Platform, tenant_id: str, workspace_id: str) -> AgentRuntimeProfile | None:
        return self.default

    async def applied(self, platform: Platform, tenant_id: str, profile_id: str, computer_id: str) -> None:
        return None


async def test_agent_runtime_profiles(runtime_api: Api, owner: Tenant) -> None:
    async def post(**body: Any) -> Any:
        return await runtime_api.request("POST", f"{API}/computers", key=owner.key, json={"name": "p", "template_type": "svc-desktop", **body})

    for alias in ("agent_runtime_profile_id", "agent_profile_id"):  # no profiles in the tenant at all
        assert_error(await post(**{alias: new_uuid()}), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    node_resolver = runtime_api.platform.agent_runtime_profiles
    store = Profiles(
        profiles={
            "coder": AgentRuntimeProfile("coder", env={"AGENT_MODE": "coder"}),
            "browser-only": AgentRuntimeProfile("browser-only", applies_to_computers=False),
        },
        default=AgentRuntimeProfile("house-default", env={"AGENT_MODE": "default"}),
    )
    runtime_api.platform.agent_runtime_profiles = store
    try:
        assert_error(await post(agent_profile_id="missing"), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
        assert_error(await post(agent_runtime_profile_id="browser-only"), 422, "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE")
        assert_error(await post(agent_runtime_profile_id="coder", agent_profile_id="other"), 422, "VALIDATION_ERROR")
        assert_error(await post(skip_agent_runtime_profile="yes"), 422, "VALIDATION_ERROR")
        explicit = await post(agent_profile_id="coder", skip_agent_runtime_profile=True)
        defaulted = await post()
        skipped = await post(skip_agent_runtime_profile=True)
        for response in (explicit, defaulted, skipped):
            assert response.status_code == 201, response.text
        modes = {}
        for name, response in (("explicit", explicit), ("default", defaulted), ("skipped", skipped)):
            computer = await wait_for(runtime_api, owner, response.json()["id"], "running")
            env = (await call(runtime_api, owner, "GET", computer["id"], "/env")).json()["env"]
            modes[name] = ([e["name"] for e in env], (await run(runtime_api, owner, computer["id"], 'printf %s "${AGENT_MODE-none}"'))["output"])
        assert modes == {"explicit": (["AGENT_MODE"], "coder"), "default": (["AGENT_MODE"], "default"), "skipped": ([], "none")}
    finally:
        runtime_api.platform.agent_runtime_profiles = node_resolver


async def test_selected_apps_are_installed_after_boot_and_read_from_the_instance(runtime_api: Api, owner: Tenant) -> None:
    created = await create(runtime_api, owner, selected_apps=["sqlite3", "tmux", "sqlite3"])
    assert created["selected_apps"] == ["sqlite3", "tmux"]
    computer = await wait_for(runtime_api, owner, created["id"], "running", timeout=300)
    assert "error" not in computer, computer.get("error")
    apps = await call(runtime_api, owner, "GET", computer["id"], "/apps")
    assert apps.status_code == 200, apps.text
    by_name = {app["name"]: app["version"] for app in apps.json()["apps"]}
    assert set(apps.json()) == {"apps"} and all(set(app) == {"name", "version"} for app in apps.json()["apps"])
    assert {"python3", "pip", "curl", "wget", "git", "vim", "jq", "htop", "tree", "zip", "unzip", "sqlite3", "tmux"} <= set(by_name)
    assert "nodejs" not in by_name  # Node.js only when chosen
    assert by_name["python3"].startswith("3.")
    assert (await run(runtime_api, owner, computer["id"], "sqlite3 --version >/dev/null && tmux -V"))["exit_code"] == 0
    # Read from the instance, not the record: what the user removes is gone.
    await run(runtime_api, owner, computer["id"], "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q tmux")
    after = {app["name"] for app in (await call(runtime_api, owner, "GET", computer["id"], "/apps")).json()["apps"]}
    assert "tmux" not in after and "sqlite3" in after


async def test_a_workspace_restricted_key_stays_in_its_workspace(runtime_api: Api, owner: Tenant) -> None:
    elsewhere = await create(runtime_api, owner, workspace_slug="elsewhere")
    made = await runtime_api.request(
        "POST", f"{API}/api-keys", key=owner.key, json={"name": "ws", "key_type": "platform", "workspace_id": owner.workspace_id}
    )
    assert made.status_code == 201, made.text
    restricted = made.json()["data"]["key"]
    mine = await runtime_api.request("POST", f"{API}/computers", key=restricted, json={"name": "mine", "template_type": "svc-desktop"})
    assert mine.status_code == 201 and mine.json()["workspace_id"] == owner.workspace_id
    listed = (await runtime_api.request("GET", f"{API}/computers", key=restricted)).json()
    assert [c["id"] for c in listed["computers"]] == [mine.json()["id"]]
    assert_error(await runtime_api.request("GET", f"{API}/computers/{elsewhere['id']}", key=restricted), 404, "COMPUTER_NOT_FOUND")
    for body in ({"workspace_slug": "new-one"}, {"workspace_id": elsewhere["workspace_id"]}):
        refused = await runtime_api.request("POST", f"{API}/computers", key=restricted, json={"name": "x", "template_type": "svc-desktop", **body})
        assert_error(refused, 403, "FORBIDDEN")
    workspaces = (await runtime_api.request("GET", f"{API}/workspaces", key=owner.key)).json()["data"]
    assert "new-one" not in {w["slug"] for w in workspaces}
