"""Custom domains of computers (spec "Custom domain", contract §12): register, list, verify
against a real DNS server on loopback, remove; errors, limits, scopes, tenant isolation,
idempotent replays; the preview router serving a verified domain and `GET /tls/ask`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from tests.dns_server import DnsServer, dns_server
from tests.http.domain_support import (
    API,
    SERVICE_DOMAIN,
    add_domain,
    domain_server,
    new_computer,
    router_get,
    verify,
)
from tests.support import (
    RUNTIME_SETTINGS,
    Api,
    Tenant,
    assert_error,
    create_key,
    member_key,
    running_server,
)


@pytest.fixture
async def server(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with domain_server(tmp_path_factory) as found:
        yield found


@pytest.fixture
async def api(server: tuple[Api, DnsServer]) -> Api:
    return server[0]


@pytest.fixture
def dns(server: tuple[Api, DnsServer]) -> DnsServer:
    return server[1]


@pytest.fixture
async def tenant(api: Api) -> Tenant:
    return await api.create_tenant()


@pytest.fixture
async def computer(api: Api, tenant: Tenant) -> dict[str, Any]:
    return await new_computer(api, tenant)


async def test_register_list_get(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    cid, slug = computer["id"], computer["slug"]
    response = await api.request("POST", f"{API}/computers/{cid}/domains", key=tenant.key, json={"domain": "App.Example.COM."})
    assert response.status_code == 201, response.text
    domain = response.json()["data"]
    assert domain["fqdn"] == "app.example.com"
    assert domain["status"] == "pending"
    assert domain["computer_id"] == cid and domain["deployment_id"] is None
    assert domain["verification_target"] == f"{slug}.{SERVICE_DOMAIN}"
    assert domain["dns_instructions"] == {"type": "CNAME", "name": "app.example.com", "value": f"{slug}.{SERVICE_DOMAIN}"}
    assert domain["verified_at"] is None and domain["tls_issued_at"] is None
    assert domain["tenant_id"] == tenant.id
    assert domain["workspace_id"] == computer["workspace_id"] and domain["project_id"] == computer["project_id"]
    for name in ("id", "created_at", "updated_at", "external_workspace_id", "external_user_id", "external_project_id"):
        assert name in domain

    flat = await api.request("POST", f"{API}/custom-domains", key=tenant.key, json={"domain": "www.example.com", "computer_id": cid})
    assert flat.status_code == 201, flat.text
    second = flat.json()["data"]

    nested = await api.request("GET", f"{API}/computers/{cid}/domains", key=tenant.key)
    assert nested.status_code == 200
    assert nested.json() == {"data": [domain, second], "total": 2}
    listed = await api.request("GET", f"{API}/custom-domains", key=tenant.key, params={"computer_id": cid})
    assert listed.json() == {"data": [domain, second], "total": 2}
    everything = await api.request("GET", f"{API}/custom-domains", key=tenant.key)
    assert everything.json()["total"] == 2
    one = await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key)
    assert one.status_code == 200 and one.json() == {"data": domain}


@pytest.mark.parametrize(
    "value, status, message",
    [
        (None, 400, "domain is required"),
        ("", 400, "domain is required"),
        ("   ", 400, "domain is required"),
        (42, 422, "must be a string"),
        ("https://app.example.com", 422, "without a scheme"),
        ("*.example.com", 422, "wildcard"),
        ("app.example.com/path", 422, "without a path"),
        ("app.example.com:8443", 422, "port"),
        ("localhost", 422, "fully qualified"),
        ("bad_name.example.com", 422, "RFC 1123"),
        ("-app.example.com", 422, "RFC 1123"),
        ("app..example.com", 422, "RFC 1123"),
        ("a" * 64 + ".example.com", 422, "RFC 1123"),
        ("10.0.0.1", 422, "IP address"),
        (SERVICE_DOMAIN, 422, "service's own domain"),
        (f"app.{SERVICE_DOMAIN}", 422, "service's own domain"),
        (f"x.app.{SERVICE_DOMAIN.upper()}", 422, "service's own domain"),
    ],
)
async def test_register_errors(api: Api, tenant: Tenant, computer: dict[str, Any], value: Any, status: int, message: str) -> None:
    body = {} if value is None else {"domain": value}
    response = await api.request("POST", f"{API}/computers/{computer['id']}/domains", key=tenant.key, json=body)
    error = assert_error(response, status, "MISSING_PARAM" if status == 400 else "VALIDATION_ERROR")
    assert message in error["message"], error


def _name_of_length(length: int) -> str:
    """A valid FQDN of exactly `length` characters (labels of at most 63)."""
    labels: list[str] = []
    remaining = length - len(".example.com")
    while remaining > 0:
        size = min(63, remaining)
        if remaining - size == 1:  # a label and its dot must both fit
            size -= 1
        labels.append("a" * size)
        remaining -= size + 1
    name = ".".join(labels) + ".example.com"
    assert len(name) == length, (len(name), length)
    return name


async def test_name_length_limit(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    """At most 253 characters: 253 is accepted, 254 is 422 (the final dot does not count)."""
    path = f"{API}/computers/{computer['id']}/domains"
    longest = _name_of_length(253)
    accepted = await api.request("POST", path, key=tenant.key, json={"domain": longest + "."})
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["data"]["fqdn"] == longest
    refused = await api.request("POST", path, key=tenant.key, json={"domain": "b" + _name_of_length(253)})
    error = assert_error(refused, 422, "VALIDATION_ERROR")
    assert "at most 253" in error["message"]


async def test_taken_anywhere(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    await add_domain(api, tenant, computer["id"], "shop.example.com")
    again = await api.request("POST", f"{API}/computers/{computer['id']}/domains", key=tenant.key, json={"domain": "SHOP.example.com"})
    assert assert_error(again, 409, "DOMAIN_TAKEN")["message"] == "has already been taken"
    other = await api.create_tenant("Other")
    theirs = await new_computer(api, other)
    response = await api.request("POST", f"{API}/computers/{theirs['id']}/domains", key=other.key, json={"domain": "shop.example.com"})
    assert assert_error(response, 409, "DOMAIN_TAKEN")["message"] == "has already been taken"


async def test_flat_body_errors(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    neither = await api.request("POST", f"{API}/custom-domains", key=tenant.key, json={"domain": "a.example.com"})
    assert assert_error(neither, 400, "MISSING_PARAM")["message"] == "computer_id or deployment_id is required"
    both = await api.request(
        "POST", f"{API}/custom-domains", key=tenant.key,
        json={"domain": "a.example.com", "computer_id": computer["id"], "deployment_id": "dep_01"},
    )
    assert_error(both, 422, "VALIDATION_ERROR")
    bad_id = await api.request("POST", f"{API}/custom-domains", key=tenant.key, json={"domain": "a.example.com", "computer_id": "nope"})
    assert_error(bad_id, 400, "INVALID_ID")
    unknown = await api.request(
        "POST", f"{API}/custom-domains", key=tenant.key,
        json={"domain": "a.example.com", "computer_id": "00000000-0000-4000-8000-000000000000"},
    )
    assert_error(unknown, 404, "COMPUTER_NOT_FOUND")
    missing = await api.request("GET", f"{API}/custom-domains/00000000-0000-4000-8000-000000000000", key=tenant.key)
    assert_error(missing, 404, "DOMAIN_NOT_FOUND")


async def test_verify(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "desk.example.com")
    target = domain["verification_target"]

    missing = await verify(api, tenant, domain["id"])
    error = assert_error(missing, 422, "CNAME_NOT_FOUND")
    assert error["message"] == "CNAME not found"
    assert error["details"]["expected"] == target and "no CNAME" in error["details"]["dns"]

    dns.records["desk.example.com"] = "somewhere.else.test"
    elsewhere = assert_error(await verify(api, tenant, domain["id"]), 422, "CNAME_NOT_FOUND")
    assert "somewhere.else.test" in elsewhere["details"]["dns"]

    dns.silent = True
    assert_error(await verify(api, tenant, domain["id"]), 422, "CNAME_NOT_FOUND")
    dns.silent = False
    still = await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key)
    assert still.json()["data"]["status"] == "pending"

    dns.records["desk.example.com"] = target.upper()  # case ignored (the server adds the final dot)
    ok = await verify(api, tenant, domain["id"])
    assert ok.status_code == 200, ok.text
    body = ok.json()["data"]
    assert set(body) == {"id", "fqdn", "status", "verified_at"}
    assert body["status"] == "verified" and body["verified_at"] and body["fqdn"] == "desk.example.com"

    again = await api.request("POST", f"{API}/computers/{computer['id']}/domains/{domain['id']}/verify", key=tenant.key)
    assert assert_error(again, 409, "DOMAIN_ALREADY_VERIFIED")["message"] == "domain is already verified"


async def test_verify_follows_a_cname_chain(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "chain.example.com")
    dns.records["chain.example.com"] = "alias.example.net"
    dns.records["alias.example.net"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).json()["data"]["status"] == "verified"


async def test_remove(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    cid = computer["id"]
    domain = await add_domain(api, tenant, cid, "gone.example.com")
    removed = await api.request("DELETE", f"{API}/computers/{cid}/domains/{domain['id']}", key=tenant.key)
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"data": {"id": domain["id"], "fqdn": "gone.example.com", "status": "removed"}}
    for method, path in (
        ("GET", f"/custom-domains/{domain['id']}"),
        ("POST", f"/custom-domains/{domain['id']}/verify"),
        ("DELETE", f"/custom-domains/{domain['id']}"),
        ("DELETE", f"/computers/{cid}/domains/{domain['id']}"),
    ):
        assert_error(await api.request(method, API + path, key=tenant.key), 404, "DOMAIN_NOT_FOUND")
    assert (await api.request("GET", f"{API}/computers/{cid}/domains", key=tenant.key)).json() == {"data": [], "total": 0}
    # the name is free again
    again = await add_domain(api, tenant, cid, "gone.example.com")
    flat = await api.request("DELETE", f"{API}/custom-domains/{again['id']}", key=tenant.key)
    assert flat.json()["data"]["status"] == "removed"


async def test_another_tenant_gets_404_everywhere(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    cid = computer["id"]
    domain = await add_domain(api, tenant, cid, "mine.example.com")
    other = await api.create_tenant("Other")
    theirs = await new_computer(api, other)
    checks = [
        ("POST", f"/computers/{cid}/domains", {"domain": "x.example.com"}, "COMPUTER_NOT_FOUND"),
        ("GET", f"/computers/{cid}/domains", None, "COMPUTER_NOT_FOUND"),
        ("POST", f"/computers/{cid}/domains/{domain['id']}/verify", None, "COMPUTER_NOT_FOUND"),
        ("DELETE", f"/computers/{cid}/domains/{domain['id']}", None, "COMPUTER_NOT_FOUND"),
        ("POST", "/custom-domains", {"domain": "x.example.com", "computer_id": cid}, "COMPUTER_NOT_FOUND"),
        ("GET", f"/custom-domains?computer_id={cid}", None, "COMPUTER_NOT_FOUND"),
        ("GET", f"/custom-domains/{domain['id']}", None, "DOMAIN_NOT_FOUND"),
        ("POST", f"/custom-domains/{domain['id']}/verify", None, "DOMAIN_NOT_FOUND"),
        ("DELETE", f"/custom-domains/{domain['id']}", None, "DOMAIN_NOT_FOUND"),
        # their own computer's path with my domain's id
        ("POST", f"/computers/{theirs['id']}/domains/{domain['id']}/verify", None, "DOMAIN_NOT_FOUND"),
        ("DELETE", f"/computers/{theirs['id']}/domains/{domain['id']}", None, "DOMAIN_NOT_FOUND"),
    ]
    for method, path, body, code in checks:
        response = await api.request(method, API + path, key=other.key, json=body)
        assert_error(response, 404, code)
    assert (await api.request("GET", f"{API}/custom-domains", key=other.key)).json() == {"data": [], "total": 0}
    mine = await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key)
    assert mine.json()["data"]["status"] == "pending"


async def test_deployment_routes_without_deployments(api: Api, tenant: Tenant) -> None:
    """Until the tenant has the deployment, every deployment route is 404 DEPLOYMENT_NOT_FOUND."""
    for method, path, body in (
        ("POST", "/deployments/dep_01jnope/domains", {"domain": "d.example.com"}),
        ("GET", "/deployments/dep_01jnope/domains", None),
        ("POST", "/deployments/dep_01jnope/domains/00000000-0000-4000-8000-000000000000/verify", None),
        ("DELETE", "/deployments/dep_01jnope/domains/00000000-0000-4000-8000-000000000000", None),
        ("POST", "/custom-domains", {"domain": "d.example.com", "deployment_id": "dep_01jnope"}),
        ("GET", "/custom-domains?deployment_id=dep_01jnope", None),
    ):
        assert_error(await api.request(method, API + path, key=tenant.key, json=body), 404, "DEPLOYMENT_NOT_FOUND")


async def test_scopes(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    cid = computer["id"]
    domain = await add_domain(api, tenant, cid, "scoped.example.com")
    reader = (await create_key(api, tenant.key, scopes=["computers:read"]))["key"]
    writer = (await create_key(api, tenant.key, scopes=["domains:write"]))["key"]
    for method, path, body in (
        ("POST", f"/computers/{cid}/domains", {"domain": "r.example.com"}),
        ("POST", "/custom-domains", {"domain": "r.example.com", "computer_id": cid}),
        ("POST", f"/custom-domains/{domain['id']}/verify", None),
        ("DELETE", f"/custom-domains/{domain['id']}", None),
    ):
        assert_error(await api.request(method, API + path, key=reader, json=body), 403, "insufficient_scope")
    assert (await api.request("GET", f"{API}/computers/{cid}/domains", key=reader)).status_code == 200
    assert (await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=reader)).status_code == 200
    for path in (f"/computers/{cid}/domains", f"/custom-domains/{domain['id']}", f"/custom-domains?computer_id={cid}"):
        assert_error(await api.request("GET", API + path, key=writer), 403, "insufficient_scope")
    assert (await api.request("GET", f"{API}/custom-domains", key=writer)).json() == {"data": [], "total": 0}
    made = await api.request("POST", f"{API}/computers/{cid}/domains", key=writer, json={"domain": "w.example.com"})
    assert made.status_code == 201, made.text


async def test_idempotent_register(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    path = f"{API}/custom-domains"
    body = {"domain": "once.example.com", "computer_id": computer["id"]}
    headers = {"Idempotency-Key": "register-once"}
    first = await api.request("POST", path, key=tenant.key, json=body, headers=headers)
    assert first.status_code == 201, first.text
    replay = await api.request("POST", path, key=tenant.key, json=body, headers=headers)
    assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    listed = await api.request("GET", f"{API}/computers/{computer['id']}/domains", key=tenant.key)
    assert listed.json()["total"] == 1
    reused = await api.request("POST", path, key=tenant.key, json={**body, "domain": "twice.example.com"}, headers=headers)
    assert_error(reused, 422, "IDEMPOTENCY_KEY_REUSED")


async def test_audit_names_the_domain_actions(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "audited.example.com")
    dns.records["audited.example.com"] = domain["verification_target"]
    await verify(api, tenant, domain["id"])
    await api.request("DELETE", f"{API}/custom-domains/{domain['id']}", key=tenant.key)
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    rows = await api.platform.db.fetch_all(
        "SELECT action, resource_type, resource_id FROM audit_events WHERE tenant_id = ? AND action LIKE 'domains.%' ORDER BY created_at",
        (tenant.id,),
    )
    assert [(row["action"], row["resource_type"], row["resource_id"]) for row in rows] == [
        ("domains.create", "custom_domain", domain["id"]),
        ("domains.verify", "custom_domain", domain["id"]),
        ("domains.delete", "custom_domain", domain["id"]),
    ]


# -- the router and the TLS edge's question ----------------------------------------------


async def ask(api: Api, name: str) -> int:
    response = await api.request("GET", f"{API}/tls/ask", params={"domain": name})
    return response.status_code


async def test_router_serves_a_verified_domain_until_removed(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "desktop.example.com")
    pending = await router_get(api, "desktop.example.com")
    assert pending.status_code == 404  # not verified: not routed
    assert await ask(api, "desktop.example.com") == 404

    dns.records["desktop.example.com"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    served = await router_get(api, "desktop.example.com")
    # the computer's own desktop page answers: it asks for the computer's stream token
    assert served.status_code == 401, served.text
    assert served.headers["X-Corral-Preview-Error"] == "token_required"
    assert computer["name"] in served.text
    assert await ask(api, "desktop.example.com") == 200
    assert await ask(api, "DESKTOP.example.com.") == 200

    removed = await api.request("DELETE", f"{API}/custom-domains/{domain['id']}", key=tenant.key)
    assert removed.status_code == 200
    gone = await router_get(api, "desktop.example.com")
    assert gone.status_code == 404
    assert await ask(api, "desktop.example.com") == 404


async def test_tls_ask_for_resource_hosts(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    slug = computer["slug"]
    assert await ask(api, f"{slug}.{SERVICE_DOMAIN}") == 200
    assert await ask(api, f"nope-{slug}.{SERVICE_DOMAIN}") == 404
    assert await ask(api, f"{slug}.elsewhere.test") == 404  # not a preview domain of its tenant
    assert await ask(api, "") == 404
    assert await ask(api, "a" * 300) == 404
    missing = await api.request("GET", f"{API}/tls/ask")
    assert_error(missing, 404, "NOT_FOUND")
    sandbox = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={})
    assert sandbox.status_code in (200, 201, 202), sandbox.text
    sandbox_slug = sandbox.json()["data"]["slug"] if "data" in sandbox.json() else sandbox.json()["slug"]
    # right after the create's answer, before its event may have reached the edge's index
    assert await ask(api, f"3000-{sandbox_slug}.sandbox.{SERVICE_DOMAIN}") == 200
    assert await ask(api, f"0-{sandbox_slug}.sandbox.{SERVICE_DOMAIN}") == 404

    deleted = await api.request("DELETE", f"{API}/computers/{computer['id']}", key=tenant.key)
    assert deleted.status_code == 200, deleted.text
    with trio.fail_after(10):
        while await ask(api, f"{slug}.{SERVICE_DOMAIN}") != 404:
            await trio.sleep(0.05)


async def test_deleting_the_computer_removes_its_domains(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "owned.example.com")
    dns.records["owned.example.com"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    assert (await api.request("DELETE", f"{API}/computers/{computer['id']}", key=tenant.key)).status_code == 200
    with trio.fail_after(10):
        while await ask(api, "owned.example.com") != 404:
            await trio.sleep(0.05)
    assert_error(await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key), 404, "DOMAIN_NOT_FOUND")
    assert (await router_get(api, "owned.example.com")).status_code == 404


async def test_a_viewer_cannot_change_domains(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    domain = await add_domain(api, tenant, computer["id"], "viewed.example.com")
    user_id, key = await member_key(api, tenant, "member")
    added = await api.request(
        "POST", f"{API}/workspaces/{tenant.workspace_id}/members", key=tenant.key, json={"user_id": user_id, "role": "viewer"}
    )
    if added.status_code == 409:
        added = await api.request(
            "PATCH", f"{API}/workspaces/{tenant.workspace_id}/members/{user_id}", key=tenant.key, json={"role": "viewer"}
        )
    assert added.status_code in (200, 201), added.text
    listed = await api.request("GET", f"{API}/computers/{computer['id']}/domains", key=key)
    assert listed.status_code == 200
    refused = await api.request("DELETE", f"{API}/custom-domains/{domain['id']}", key=key)
    assert_error(refused, 403, "FORBIDDEN")


async def test_tls_ask_under_a_tenants_preview_domain(api: Api, dns: DnsServer, tenant: Tenant, computer: dict[str, Any]) -> None:
    """A computer's host under its tenant's preview domain may be certified; another
    tenant's computer under that domain may not."""
    put = await api.request("PUT", f"{API}/tenant/preview-domain", key=tenant.key, json={"preview_domain": "acme-preview.com"})
    assert put.status_code == 200, put.text
    other = await api.create_tenant("Other")
    theirs = await new_computer(api, other)
    with trio.fail_after(15):  # the edge's index re-reads preview domains every 5 s
        while await ask(api, f"{computer['slug']}.acme-preview.com") != 200:
            await trio.sleep(0.1)
    assert await ask(api, f"{theirs['slug']}.acme-preview.com") == 404
    assert await ask(api, f"{theirs['slug']}.{SERVICE_DOMAIN}") == 200


async def test_tls_ask_has_its_own_rate_limit(api: Api, computer: dict[str, Any]) -> None:
    """Caddy asks from one address: more than the anonymous limit (600 a minute) passes,
    and the other anonymous requests of that address keep their own budget."""
    host = f"{computer['slug']}.{SERVICE_DOMAIN}"
    for _ in range(650):
        response = await api.request("GET", f"{API}/tls/ask", params={"domain": host})
        assert response.status_code == 200, response.text
    assert int(response.headers["X-RateLimit-Limit"]) == 30_000
    other = await api.request("GET", f"{API}/tls/ask-nothing")
    assert int(other.headers["X-RateLimit-Limit"]) == 600


async def test_domains_route_again_after_a_restart(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The domain map is loaded at start: a verified domain routes and is certified after a
    restart of the node, a pending one is still pending."""
    data_dir = tmp_path_factory.mktemp("restart")
    async with dns_server() as dns:
        settings = {**RUNTIME_SETTINGS, "dns_servers": dns.address}
        async with running_server(data_dir, **settings) as first:
            tenant = await first.create_tenant()
            computer = await new_computer(first, tenant)
            kept = await add_domain(first, tenant, computer["id"], "kept.example.com")
            waiting = await add_domain(first, tenant, computer["id"], "waiting.example.com")
            dns.records["kept.example.com"] = kept["verification_target"]
            assert (await verify(first, tenant, kept["id"])).status_code == 200
        async with running_server(data_dir, **settings) as second:
            try:
                assert (await router_get(second, "kept.example.com")).status_code == 401  # the desktop, asking for its token
                assert await ask(second, "kept.example.com") == 200
                assert (await router_get(second, "waiting.example.com")).status_code == 404
                assert await ask(second, "waiting.example.com") == 404
                response = await second.request("GET", f"{API}/custom-domains/{waiting['id']}", key=tenant.key)
                assert response.json()["data"]["status"] == "pending"
            finally:
                driver = await second.platform.runtime.driver()
                for info in await driver.instances():
                    await driver.destroy(info.id)


async def test_a_key_of_another_workspace_sees_nothing(api: Api, tenant: Tenant, computer: dict[str, Any]) -> None:
    """A key restricted to another workspace of the same tenant: its domains are 404 too."""
    domain = await add_domain(api, tenant, computer["id"], "walled.example.com")
    workspace = await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Elsewhere"})
    assert workspace.status_code == 201, workspace.text
    walled = (await create_key(api, tenant.key, key_type="platform", workspace_id=workspace.json()["data"]["id"]))["key"]
    assert_error(await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=walled), 404, "DOMAIN_NOT_FOUND")
    assert_error(await api.request("GET", f"{API}/computers/{computer['id']}/domains", key=walled), 404, "COMPUTER_NOT_FOUND")
    assert_error(await api.request("DELETE", f"{API}/custom-domains/{domain['id']}", key=walled), 404, "DOMAIN_NOT_FOUND")
    assert (await api.request("GET", f"{API}/custom-domains", key=walled)).json() == {"data": [], "total": 0}
    mine = (await create_key(api, tenant.key, key_type="platform", workspace_id=tenant.workspace_id))["key"]
    assert (await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=mine)).status_code == 200
