"""Bound placeholders reach real instances: a sandbox's execs and processes and a
computer's boot and execs, including bindings made while they run. The instance sees
only the `svc-tok-` placeholder, never the value."""

from __future__ import annotations

import re
from typing import Any

import trio

from corral.actors import egress
from tests.http.computer_support import create_running
from tests.http.computer_support import run as computer_run
from tests.support import API, Api, Tenant

from .test_sandbox_processes import logs, start, wait_status
from .test_sandboxes import create, run

VALUE = "sk-live-0123456789abcdefSECRET"
PLACEHOLDER = re.compile(r"svc-tok-[A-Za-z0-9]{32}")


async def egress_post(api: Api, tenant: Tenant, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/egress{path}", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_sandbox_gets_placeholders_in_new_execs_and_processes(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    assert (await run(runtime_api, owner, sid, 'echo "[$STRIPE_KEY]"'))["stdout"] == "[]\n"

    created = await egress_post(runtime_api, owner, "/secrets", {
        "name": "stripe", "value": VALUE, "type": "api_key", "scope": "tenant", "expose_as_env": "STRIPE_KEY",
        "allowed_hosts": ["api.stripe.com"],
    })
    scope_wide = created["binding"]["placeholder_token"]
    printed = await run(runtime_api, owner, sid, "printenv")
    assert f"STRIPE_KEY={scope_wide}\n" in printed["stdout"] and VALUE not in printed["stdout"]

    bound = await egress_post(runtime_api, owner, "/bindings", {
        "secret_id": created["data"]["id"], "resource_id": sid, "resource_type": "sandbox", "expose_as_env": "OWN_KEY",
    })
    own = bound["data"]["placeholder_token"]
    assert (await run(runtime_api, owner, sid, 'echo "$OWN_KEY"'))["stdout"] == f"{own}\n"

    process = await start(runtime_api, owner, sid, cmd='echo "$OWN_KEY $STRIPE_KEY"')
    await wait_status(runtime_api, owner, sid, process["pid"], "exited")
    assert await logs(runtime_api, owner, sid, process["pid"]) == [f"{own} {scope_wide}"]
    context = await egress.load_context_for_instance(runtime_api.platform, sid)
    assert context is not None and context.resource_type == "sandbox"
    assert sorted(s.placeholder for s in context.secrets) == sorted([own, scope_wide])
    assert await egress.load_context_for_instance(runtime_api.platform, "no-such-instance") is None


async def test_computer_gets_placeholders_in_execs(runtime_api: Api, owner: Tenant) -> None:
    created = await egress_post(runtime_api, owner, "/secrets", {
        "name": "openai", "value": VALUE, "type": "api_key", "scope": "workspace", "workspace_id": owner.workspace_id,
        "expose_as_env": "OPENAI_API_KEY",
    })
    computer = await create_running(runtime_api, owner)
    printed = await computer_run(runtime_api, owner, computer["id"], 'echo "$OPENAI_API_KEY"')
    assert printed["output"].strip() == created["binding"]["placeholder_token"]
    assert PLACEHOLDER.fullmatch(printed["output"].strip())
    # The proxy's view of the instance: the computer, its placeholder and value.
    instance_id = await runtime_api.platform.db.fetch_value("SELECT instance_id FROM computers WHERE id = ?", (computer["id"],))
    context = await egress.load_context_for_instance(runtime_api.platform, instance_id)
    assert context is not None and context.resource_type == "computer" and context.resource.id == computer["id"]
    assert [(s.placeholder, s.value) for s in context.secrets] == [(created["binding"]["placeholder_token"], VALUE)]


async def test_bindings_and_policy_go_with_their_sandbox(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    secret = await egress_post(runtime_api, owner, "/secrets", {"name": "gone", "value": VALUE, "type": "api_key", "scope": "tenant"})
    await egress_post(runtime_api, owner, "/bindings", {
        "secret_id": secret["data"]["id"], "resource_id": sid, "resource_type": "sandbox", "expose_as_env": "GONE_KEY",
    })
    policy = await egress_post(runtime_api, owner, "/policies", {"resource_id": sid, "resource_type": "sandbox", "mode": "enforce", "default_action": "deny"})
    await egress_post(runtime_api, owner, "/allowlist", {"policy_id": policy["data"]["id"], "pattern": "api.example.com", "kind": "exact"})

    async def listed(path: str) -> list[dict[str, Any]]:
        response = await runtime_api.request("GET", f"{API}/egress{path}", key=owner.key)
        assert response.status_code == 200, response.text
        return [item for item in response.json()["data"] if item.get("resource_id") == sid or item.get("policy_id") == policy["data"]["id"]]

    assert len(await listed("/bindings")) == 1 and len(await listed("/policies")) == 1
    destroyed = await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}", key=owner.key)
    assert destroyed.status_code in (200, 204), destroyed.text
    with trio.fail_after(10):
        while await listed("/bindings") or await listed("/policies"):
            await trio.sleep(0.05)
    assert await listed("/allowlist") == []
    # The secret itself stays (it belongs to the tenant, not the sandbox).
    assert (await runtime_api.request("GET", f"{API}/egress/secrets/{secret['data']['id']}", key=owner.key)).status_code == 200
