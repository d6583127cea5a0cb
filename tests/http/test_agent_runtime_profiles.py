"""Agent runtime profiles (contract §14): the API, sealed env, defaults, and their effect
on computer create (env synced, secrets bound as placeholders) and on runs."""

from __future__ import annotations

from typing import Any

import pytest

from corral.actors import agent_profiles
from corral.ids import new_uuid
from corral.storage import DecryptionError, associated_data
from tests.http.computer_support import call as computer_call
from tests.http.computer_support import create as create_computer
from tests.http.computer_support import run as computer_run
from tests.http.computer_support import wait_for
from tests.support import API, Api, Tenant, assert_error, create_key

from .test_sandboxes import create as create_sandbox
from .test_sandboxes import run as sandbox_run

PATH = f"{API}/agent-runtime-profiles"


async def make(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("name", f"profile-{new_uuid()[:8]}")
    body.setdefault("provider", "claude")
    response = await api.request("POST", PATH, key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def secret(api: Api, tenant: Tenant, name: str, value: str) -> str:
    response = await api.request(
        "POST", f"{API}/egress/secrets", key=tenant.key,
        json={"name": name, "value": value, "type": "api_key", "scope": "tenant", "allowed_hosts": ["api.example.test"]},
    )
    assert response.status_code == 201, response.text
    secret_id: str = response.json()["data"]["id"]
    return secret_id


async def test_create_get_list_patch_delete_without_env_values(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    created = await make(
        api, tenant, name="coder", provider="custom", command="run-agent --fast", model="gpt-x",
        env={"AGENT_MODE": "coder", "API_TOKEN": "tok-plaintext-123"}, applies_to=["computer", "sandbox", "computer"],
    )
    assert set(created) == {
        "id", "tenant_id", "workspace_id", "name", "provider", "model", "command", "applies_to", "env_keys", "secret_ids",
        "is_default", "default_for", "created_at", "updated_at",
    }
    assert created["applies_to"] == ["sandbox", "computer"] and created["env_keys"] == ["AGENT_MODE", "API_TOKEN"]
    assert created["is_default"] is False and created["workspace_id"] is None and created["tenant_id"] == tenant.id
    pid = created["id"]
    for ref in (pid, "coder", pid.upper()):
        got = await api.request("GET", f"{PATH}/{ref}", key=tenant.key)
        assert got.status_code == 200 and got.json()["data"] == created
    listed = await api.request("GET", PATH, key=tenant.key)
    assert listed.json() == {"data": [created]}

    patched = await api.request("PATCH", f"{PATH}/{pid}", key=tenant.key, json={"model": None, "env": {"ONLY": "this"}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["data"]["model"] is None and patched.json()["data"]["env_keys"] == ["ONLY"]
    assert patched.json()["data"]["command"] == "run-agent --fast"

    # Sealed at rest, bound to its tenant and profile; never in a response or an audit row.
    row = await api.platform.db.fetch_one("SELECT * FROM agent_runtime_profiles WHERE id = ?", (pid,))
    assert row is not None and b"this" not in bytes(row["env_sealed"]) and b"plaintext" not in bytes(row["env_sealed"])
    box = api.platform.secrets
    aad = associated_data(tenant.id, pid, "agent-runtime-profile-env")
    assert box.decrypt_text(row["env_sealed"], aad) == '{"ONLY": "this"}'
    with pytest.raises(DecryptionError):
        box.decrypt_text(row["env_sealed"], associated_data(other_tenant.id, pid, "agent-runtime-profile-env"))
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    audit = await api.platform.db.fetch_all("SELECT * FROM audit_events WHERE tenant_id = ?", (tenant.id,))
    assert audit and "plaintext" not in str(audit)
    for response in (listed, patched):
        assert "plaintext" not in response.text and '"this"' not in response.text

    # Another tenant: 404 everywhere, and its list is empty.
    for method in ("GET", "PATCH", "DELETE"):
        response = await api.request(method, f"{PATH}/{pid}", key=other_tenant.key, json={})
        assert_error(response, 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    assert (await api.request("GET", PATH, key=other_tenant.key)).json() == {"data": []}

    deleted = await api.request("DELETE", f"{PATH}/{pid}", key=tenant.key)
    assert deleted.status_code == 200 and deleted.json() == {"data": {"id": pid, "deleted": True}}
    assert_error(await api.request("GET", f"{PATH}/{pid}", key=tenant.key), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    assert_error(await api.request("DELETE", f"{PATH}/{pid}", key=tenant.key), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")


async def test_validation_and_errors(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    assert_error(await api.request("POST", PATH, key=tenant.key, json={"provider": "claude"}), 400, "MISSING_PARAM")
    assert_error(await api.request("POST", PATH, key=tenant.key, json={"name": "x"}), 400, "MISSING_PARAM")
    assert_error(await api.request("POST", PATH, key=tenant.key, content=b"nope"), 400, "INVALID_BODY")
    foreign = await secret(api, other_tenant, "theirs", "value-of-other")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"provider": "gemini"}, "provider"),
        ({"applies_to": []}, "applies_to"),
        ({"applies_to": ["vm"]}, "applies_to"),
        ({"env": {"lower": "x"}}, "env"),
        ({"env": {"OK": 5}}, "env"),
        ({"secret_ids": ["not-a-uuid"]}, "secret_ids"),
        ({"secret_ids": [new_uuid()]}, "secret_ids"),
        ({"secret_ids": [foreign]}, "secret_ids"),
        ({"is_default": "yes"}, "is_default"),
        ({"name": "x" * 101}, "name"),
        ({"env": {f"K{i}": "v" for i in range(201)}}, "env"),
        ({"env": {"BIG": "v" * 32769}}, "env"),
        ({"env": {"NUL": "a\u0000b"}}, "env"),
        ({"provider": "custom", "command": "run \u0000"}, "command"),
    ]
    for extra, field_name in bad:
        response = await api.request("POST", PATH, key=tenant.key, json={"name": "n", "provider": "claude", **extra})
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert field_name in error["details"], (extra, error)
    assert_error(
        await api.request("POST", PATH, key=tenant.key, json={"name": "n", "provider": "claude", "workspace_id": other_tenant.workspace_id}),
        404, "NOT_FOUND",
    )
    at_limits = await make(api, tenant, name="x" * 100, env={**{f"K{i}": "v" for i in range(199)}, "BIG": "v" * 32768})
    assert len(at_limits["env_keys"]) == 200
    await make(api, tenant, name="taken")
    assert_error(await api.request("POST", PATH, key=tenant.key, json={"name": "taken", "provider": "pi"}), 409, "PROFILE_NAME_TAKEN")
    other = await make(api, tenant, name="other")
    assert_error(await api.request("PATCH", f"{PATH}/{other['id']}", key=tenant.key, json={"name": "taken"}), 409, "PROFILE_NAME_TAKEN")
    assert_error(
        await api.request("PATCH", f"{PATH}/{other['id']}", key=tenant.key, json={"provider": "custom", "command": 5}), 422, "VALIDATION_ERROR"
    )
    reader = await create_key(api, tenant.key, scopes=["agents:read"])
    assert_error(await api.request("POST", PATH, key=reader["key"], json={"name": "r", "provider": "pi"}), 403, "insufficient_scope")
    assert (await api.request("GET", PATH, key=reader["key"])).status_code == 200
    assert_error(await api.request("GET", PATH), 401, "invalid_token")


async def test_a_custom_profile_may_leave_the_command_to_the_run(api: Api, tenant: Tenant) -> None:
    """Contract §14: `command` is optional on a profile, `custom` included; the run gives it."""
    bare = await make(api, tenant, name="bring-your-own", provider="custom", env={"MODE": "x"})
    assert (bare["provider"], bare["command"]) == ("custom", None)
    got = await api.request("GET", f"{PATH}/bring-your-own", key=tenant.key)
    assert got.status_code == 200 and got.json()["data"]["command"] is None
    # Turning another profile into `custom`, or removing a custom profile's command, is accepted too.
    other = await make(api, tenant, name="was-claude", provider="claude")
    patched = await api.request("PATCH", f"{PATH}/{other['id']}", key=tenant.key, json={"provider": "custom"})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["data"]["provider"], patched.json()["data"]["command"]) == ("custom", None)
    with_command = await make(api, tenant, name="had-command", provider="custom", command="agent --go")
    cleared = await api.request("PATCH", f"{PATH}/{with_command['id']}", key=tenant.key, json={"command": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["data"]["command"] is None


async def test_idempotent_create_replays(api: Api, tenant: Tenant) -> None:
    headers = {"Idempotency-Key": "profile-once"}
    body = {"name": "once", "provider": "codex", "env": {"A": "1"}}
    first = await api.request("POST", PATH, key=tenant.key, json=body, headers=headers)
    again = await api.request("POST", PATH, key=tenant.key, json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers.get("Idempotent-Replayed") == "true" and again.json() == first.json()
    assert len((await api.request("GET", PATH, key=tenant.key)).json()["data"]) == 1


async def test_defaults_per_workspace_and_kind(api: Api, tenant: Tenant) -> None:
    platform = api.platform
    house = await make(api, tenant, name="house", is_default=True, env={"WHO": "house"})
    assert house["is_default"] is True and house["default_for"] == ["sandbox", "computer"]
    team = await make(api, tenant, name="team", is_default=True, applies_to=["computer"], workspace_id=tenant.workspace_id, env={"WHO": "team"})
    assert team["workspace_id"] == tenant.workspace_id

    async def who(kind: str, **extra: Any) -> str | None:
        resolved = await agent_profiles.resolve_for_run(platform, tenant.id, tenant.workspace_id, kind, None, False, **extra)
        return None if resolved is None else resolved.env.get("WHO")

    assert await who("sandbox") == "house"  # the tenant's default
    assert await who("computer") == "team"  # the workspace's wins
    assert await agent_profiles.resolve_for_run(platform, tenant.id, tenant.workspace_id, "sandbox", None, True) is None
    # A new tenant-level default for sandboxes takes that kind over from `house`.
    newer = await make(api, tenant, name="newer", is_default=True, applies_to=["sandbox"], env={"WHO": "newer"})
    assert await who("sandbox") == "newer"
    house_now = (await api.request("GET", f"{PATH}/house", key=tenant.key)).json()["data"]
    assert house_now["default_for"] == ["computer"] and house_now["is_default"] is True
    # Unsetting the workspace default lets the tenant's computer default apply.
    await api.request("PATCH", f"{PATH}/{team['id']}", key=tenant.key, json={"is_default": False})
    assert await who("computer") == "house"
    # Explicit profiles: by id or name; not found and not applicable.
    explicit = await agent_profiles.resolve_for_run(platform, tenant.id, None, "sandbox", "newer", False)
    assert explicit is not None and explicit.id == newer["id"] and explicit.provider == "claude" and explicit.env == {"WHO": "newer"}
    with pytest.raises(Exception) as missing:
        await agent_profiles.resolve_for_run(platform, tenant.id, None, "sandbox", "nope", False)
    assert getattr(missing.value, "code", None) == "AGENT_RUNTIME_PROFILE_NOT_FOUND"
    with pytest.raises(Exception) as inapplicable:
        await agent_profiles.resolve_for_run(platform, tenant.id, None, "computer", "newer", False)
    assert getattr(inapplicable.value, "code", None) == "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE"


async def test_computer_create_applies_profiles(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    secret_id = await secret(api, owner, "vendor-api key", "real-secret-value-123456")
    await make(api, owner, name="house", is_default=True, env={"AGENT_MODE": "default"}, secret_ids=[secret_id])
    await make(api, owner, name="sandbox-only", applies_to=["sandbox"])
    explicit = await make(api, owner, name="coder", applies_to=["computer"], env={"AGENT_MODE": "coder"})

    async def post(**body: Any) -> Any:
        return await api.request("POST", f"{API}/computers", key=owner.key, json={"name": "p", "template_type": "svc-desktop", **body})

    assert_error(await post(agent_runtime_profile_id=new_uuid()), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    assert_error(await post(agent_profile_id="sandbox-only"), 422, "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE")
    stranger = await api.create_tenant("Stranger")
    denied = await api.request(
        "POST", f"{API}/computers", key=stranger.key, json={"name": "p", "template_type": "svc-desktop", "agent_profile_id": explicit["id"]}
    )
    assert_error(denied, 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")

    defaulted = await create_computer(api, owner)
    chosen = await create_computer(api, owner, agent_profile_id="coder")
    db = api.platform.db
    house_id = (await api.request("GET", f"{PATH}/house", key=owner.key)).json()["data"]["id"]
    assert await db.fetch_value("SELECT agent_runtime_profile_id FROM computers WHERE id = ?", (defaulted["id"],)) == house_id
    assert await db.fetch_value("SELECT agent_runtime_profile_id FROM computers WHERE id = ?", (chosen["id"],)) == explicit["id"]
    defaulted = await wait_for(api, owner, defaulted["id"], "running")
    chosen = await wait_for(api, owner, chosen["id"], "running")
    env = (await computer_call(api, owner, "GET", defaulted["id"], "/env")).json()["env"]
    assert [e["name"] for e in env] == ["AGENT_MODE"]
    out = (await computer_run(api, owner, defaulted["id"], 'printf "%s|%s" "$AGENT_MODE" "$VENDOR_API_KEY"'))["output"]
    mode, placeholder = out.split("|")
    assert mode == "default" and placeholder.startswith("svc-tok-") and "real-secret" not in out
    assert (await computer_run(api, owner, chosen["id"], 'printf %s "$AGENT_MODE"'))["output"] == "coder"


async def test_runs_get_the_profile_and_its_secrets_on_the_target(runtime_api: Api, owner: Tenant) -> None:
    """What the agent-runs part calls: the resolved profile, and its secrets bound to the target."""
    api = runtime_api
    secret_id = await secret(api, owner, "model-key", "sk-real-value-000111222")
    await make(api, owner, name="runner", provider="custom", command="my-agent", applies_to=["sandbox"], is_default=True,
               env={"AGENT_MODE": "run"}, secret_ids=[secret_id])
    sandbox = await create_sandbox(api, owner)
    resolved = await agent_profiles.resolve_for_run(
        api.platform, owner.id, owner.workspace_id, "sandbox", None, False, target_id=sandbox["id"]
    )
    assert resolved is not None and resolved.command == "my-agent" and resolved.provider == "custom"
    assert resolved.env == {"AGENT_MODE": "run"}
    out = (await sandbox_run(api, owner, sandbox["id"], 'printf %s "$MODEL_KEY"'))["stdout"]
    assert out.startswith("svc-tok-") and "sk-real" not in out
    # Resolving again binds nothing twice.
    again = await agent_profiles.resolve_for_run(api.platform, owner.id, owner.workspace_id, "sandbox", "runner", False, target_id=sandbox["id"])
    assert again is not None
    assert (await sandbox_run(api, owner, sandbox["id"], 'printf %s "$MODEL_KEY"'))["stdout"] == out
