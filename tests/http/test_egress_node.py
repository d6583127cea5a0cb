"""The node runs the egress proxy: a sandbox created through the API is behind it from boot."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from corral.net.egress import AuditEntry
from tests.net.egress_support import INTERNET, Recording, internet
from tests.support import RUNTIME_SETTINGS, Api, Tenant, running_server

from .test_sandboxes import create, run


@pytest.fixture
async def egress_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> AsyncIterator[Api]:
    async with internet(tmp_path) as bundle:
        settings = {**RUNTIME_SETTINGS, "egress_allowed_destinations": (f"{INTERNET}/32",), "ca_bundle": bundle}
        async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
            try:
                yield api
            finally:
                driver = await api.platform.runtime.driver()
                for info in await driver.instances():
                    await driver.destroy(info.id)


async def test_a_sandbox_goes_through_the_node_egress_proxy(egress_api: Api) -> None:
    proxy = egress_api.platform.egress_proxy
    assert proxy is not None and proxy.bound_port == egress_api.platform.settings.egress_port
    hooks = Recording()
    proxy.hooks = hooks
    tenant: Tenant = await egress_api.create_tenant()
    sandbox = await create(egress_api, tenant)
    sid = sandbox["id"]
    printed = await run(egress_api, tenant, sid, 'printf %s "$HTTPS_PROXY"')
    assert printed["stdout"].endswith(f":{proxy.config.port}")
    assert Path(egress_api.platform.settings.data_dir, "egress-ca", "ca.crt").exists()

    result = await run(egress_api, tenant, sid, f"curl -sS --noproxy '*' --max-time 10 https://{INTERNET}/from-sandbox")
    assert result["exit_code"] == 0, result
    assert json.loads(result["stdout"]).get("target") == "/from-sandbox", result["stdout"]
    await hooks.wait(1)
    entry: AuditEntry = hooks.entries[-1]
    assert entry.info.mode == "transparent" and entry.info.scheme == "https" and entry.status_code == 200

    # private destinations other than the allowed one are refused
    refused = await run(egress_api, tenant, sid, "curl -sS --max-time 10 http://169.254.169.254/latest/meta-data/")
    assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED"


async def egress(api: Api, tenant: Tenant, method: str, path: str, body: dict[str, object] | None = None) -> dict[str, Any]:
    response = await api.request(method, f"/api/v1/egress{path}", key=tenant.key, json=body)
    assert response.status_code in (200, 201), response.text
    found: dict[str, Any] = response.json()
    return found


async def audit_rows(api: Api, tenant: Tenant, count: int) -> list[dict[str, Any]]:
    with trio.fail_after(10):
        while len(rows := (await egress(api, tenant, "GET", "/audit"))["data"]) < count:
            await trio.sleep(0.05)
    return list(rows)


async def test_the_node_proxy_substitutes_bound_secrets_and_enforces_policies(egress_api: Api) -> None:
    """The real hooks: a placeholder becomes the value only towards an allowed host, an
    echoed value comes back as the placeholder, every request is audited, enforce rejects."""
    tenant: Tenant = await egress_api.create_tenant()
    sandbox = await create(egress_api, tenant)
    sid = sandbox["id"]
    value = "sk_live_" + "9" * 24
    allowed = await egress(egress_api, tenant, "POST", "/secrets", {
        "name": "api", "value": value, "type": "api_key", "scope": "tenant", "allowed_hosts": [INTERNET],
    })
    elsewhere = await egress(egress_api, tenant, "POST", "/secrets", {
        "name": "other", "value": value + "x", "type": "api_key", "scope": "tenant", "allowed_hosts": ["api.example.com"],
    })
    bindings = {}
    for env, secret in (("API_KEY", allowed), ("OTHER_KEY", elsewhere)):
        bound = await egress(egress_api, tenant, "POST", "/bindings", {
            "secret_id": secret["data"]["id"], "resource_id": sid, "resource_type": "sandbox", "expose_as_env": env,
        })
        bindings[env] = bound["data"]["placeholder_token"]
    assert (await run(egress_api, tenant, sid, 'printf %s "$API_KEY"'))["stdout"] == bindings["API_KEY"]

    curl = f"curl -sS --noproxy '*' --max-time 10 https://{INTERNET}/echo"
    sent = await run(egress_api, tenant, sid, f'{curl} -H "Authorization: Bearer $API_KEY" -H "X-Other: $OTHER_KEY"')
    assert sent["exit_code"] == 0, sent
    echoed = json.loads(sent["stdout"])["headers"]
    assert echoed["authorization"] == f"Bearer {bindings['API_KEY']}"  # the value went up, the placeholder came back
    assert echoed["x-other"] == bindings["OTHER_KEY"]  # not an allowed host for it: never replaced
    assert value not in sent["stdout"]
    row = (await audit_rows(egress_api, tenant, 1))[0]
    assert (row["host"], row["action"], row["status_code"], row["resource_id"]) == (INTERNET, "allow", 200, sid)
    assert row["request_transforms"] == [{"type": "placeholder", "header": "authorization", "secret_id": allowed["data"]["id"]}]
    assert row["rejected_by"] == "secret_host"  # audit_only: recorded, not enforced

    policy = await egress(egress_api, tenant, "POST", "/policies", {
        "resource_id": sid, "resource_type": "sandbox", "mode": "enforce", "default_action": "allow",
    })
    await trio.sleep(1.1)  # the proxy's context of the sandbox lives a second
    # Under enforce, a placeholder towards a host its secret does not allow refuses the request.
    refused = await run(egress_api, tenant, sid, f'{curl} -H "X-Other: $OTHER_KEY"')
    assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED"
    row = (await audit_rows(egress_api, tenant, 2))[0]
    assert (row["action"], row["rejected_by"]) == ("reject", "secret_host")
    allowed_only = await run(egress_api, tenant, sid, f'{curl} -H "Authorization: Bearer $API_KEY"')
    assert json.loads(allowed_only["stdout"])["headers"]["authorization"] == f"Bearer {bindings['API_KEY']}"

    changed = await egress_api.request(
        "PATCH", f"/api/v1/egress/policies/{policy['data']['id']}", key=tenant.key, json={"default_action": "deny"}
    )
    assert changed.status_code == 200, changed.text
    await trio.sleep(1.1)
    refused = await run(egress_api, tenant, sid, curl)
    assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED"
    row = (await audit_rows(egress_api, tenant, 4))[0]
    assert (row["action"], row["rejected_by"]) == ("reject", "default_action")


async def test_the_live_tail_sees_a_proxied_request(egress_api: Api) -> None:
    tenant: Tenant = await egress_api.create_tenant()
    sandbox = await create(egress_api, tenant)
    url = f"ws://127.0.0.1:{egress_api.platform.settings.port}/api/v1/egress/audit/resource/{sandbox['id']}?token={tenant.key}"
    async with open_websocket_url(url, subprotocols=["svc-egress-audit-v1"]) as tail:
        sent = await run(egress_api, tenant, sandbox["id"], f"curl -sS --noproxy '*' --max-time 10 https://{INTERNET}/tailed")
        assert sent["exit_code"] == 0, sent
        with trio.fail_after(5):  # contract §11: within a second of the request; 5 s of slack under load
            frame = json.loads(await tail.get_message())
    assert frame["type"] == "audit_event"
    assert (frame["data"]["host"], frame["data"]["path"], frame["data"]["status_code"]) == (INTERNET, "/tailed", 200)


async def test_an_isolated_sandbox_cannot_reach_further_through_the_proxy(egress_api: Api) -> None:
    """The network policy governs ports 80 and 443 at the proxy: redirected or asked by name."""
    tenant: Tenant = await egress_api.create_tenant()
    sandbox = await create(egress_api, tenant)
    sid = sandbox["id"]
    reached = await run(egress_api, tenant, sid, f"curl -sS --max-time 10 http://{INTERNET}/before")
    assert json.loads(reached["stdout"]).get("target") == "/before", reached
    isolated = await egress_api.request(
        "PUT", f"/api/v1/sandboxes/{sid}/network-policy", key=tenant.key, json={"mode": "isolated"}
    )
    assert isolated.status_code == 200, isolated.text
    for how in ("--noproxy '*'", ""):  # redirected by nftables, and sent to the proxy by HTTP_PROXY
        refused = await run(egress_api, tenant, sid, f"curl -sS {how} --max-time 10 http://{INTERNET}/after")
        assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED", (how, refused)
