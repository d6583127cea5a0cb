"""Preview domains of tenant, workspace and project, verified against a DNS server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from tests.dns_server import DnsServer
from tests.support import Api, Tenant, assert_error, member_key, running_server

API = "/api/v1"
ROUTER_HOST = "preview.corral.localhost"


@pytest.fixture
async def api(tmp_path_factory: pytest.TempPathFactory, dns: DnsServer) -> AsyncIterator[Api]:
    """A server whose DNS checks ask `dns`, re-checking pending domains every 0.2 s."""
    async with running_server(tmp_path_factory.mktemp("corral"), dns_servers=dns.address, preview_dns_recheck_seconds=0.2) as client:
        yield client


def point(dns: DnsServer, domain: str, *, sandbox: bool = True, root: bool = True) -> None:
    if root:
        dns.records[f"*.{domain}"] = ROUTER_HOST
    if sandbox:
        dns.records[f"*.sandbox.{domain}"] = ROUTER_HOST


async def wait_status(api: Api, tenant: Tenant, path: str, status: str, timeout: float = 10) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            body: dict[str, Any] = (await api.request("GET", path, key=tenant.key)).json()
            if body["status"] == status:
                return body
            await trio.sleep(0.05)


async def test_not_configured(api: Api, tenant: Tenant) -> None:
    response = await api.request("GET", f"{API}/tenant/preview-domain", key=tenant.key)
    assert response.status_code == 200
    assert response.json() == {
        "preview_domain": None, "default_domain": "corral.localhost", "status": "not_configured", "dns_status": "pending",
        "dns_instructions": None, "verified_at": None, "last_checked_at": None, "dns_error": None,
    }


@pytest.mark.parametrize(
    "value, status, code",
    [
        (None, 400, "MISSING_PARAM"),
        ("", 400, "MISSING_PARAM"),
        ("https://acme.test", 422, "invalid_domain"),
        ("http:acme.test", 422, "invalid_domain"),
        ("*.acme.test", 422, "invalid_domain"),
        ("acme.test/path", 422, "invalid_domain"),
        ("app.acme.com", 422, "invalid_domain"),
        ("www.example.co.uk", 422, "invalid_domain"),
        ("acme.test:8080", 422, "invalid_domain"),
        ("co.uk", 422, "invalid_domain"),
        ("localhost", 422, "invalid_domain"),
        ("corral.localhost", 422, "invalid_domain"),
        ("bad_name.test", 422, "invalid_domain"),
        (42, 422, "invalid_domain"),
    ],
)
async def test_put_errors(api: Api, tenant: Tenant, value: Any, status: int, code: str) -> None:
    body = {} if value is None else {"preview_domain": value}
    response = await api.request("PUT", f"{API}/tenant/preview-domain", key=tenant.key, json=body)
    error = assert_error(response, status, code)
    if status == 400:
        assert error["message"] == "preview_domain is required"


async def test_put_verify_and_delete_the_tenant_domain(api: Api, tenant: Tenant, dns: DnsServer) -> None:
    path = f"{API}/tenant/preview-domain"
    put = await api.request("PUT", path, key=tenant.key, json={"preview_domain": " Example.CO.UK. "})
    assert put.status_code == 200, put.text
    body = put.json()
    assert body["preview_domain"] == "example.co.uk" and body["status"] == "pending_dns" and body["dns_status"] == "pending"
    assert body["dns_instructions"] == {
        "type": "CNAME", "name": "*", "value": ROUTER_HOST,
        "records": [{"type": "CNAME", "name": "*", "value": ROUTER_HOST}, {"type": "CNAME", "name": "*.sandbox", "value": ROUTER_HOST}],
    }
    verify = await api.request("POST", f"{path}/verify", key=tenant.key)
    assert verify.status_code == 200
    assert verify.json()["status"] == "pending_dns" and "no CNAME" in verify.json()["dns_error"]

    point(dns, "example.co.uk", root=False)  # only `*.sandbox`: resource URLs would not resolve
    half = (await api.request("GET", f"{path}/verify", key=tenant.key)).json()
    assert half["status"] == "pending_dns" and "CNAME *.example.co.uk" in half["dns_error"]

    point(dns, "example.co.uk")
    done = await api.request("POST", f"{path}/verify", key=tenant.key)
    assert done.json()["status"] == "configured" and done.json()["dns_status"] == "verified"
    assert done.json()["verified_at"] and done.json()["dns_error"] is None
    assert (await api.request("GET", path, key=tenant.key)).json()["status"] == "configured"

    deleted = await api.request("DELETE", path, key=tenant.key)
    assert deleted.status_code == 200 and deleted.json() == {"preview_domain": None, "status": "removed"}
    assert (await api.request("GET", path, key=tenant.key)).json()["status"] == "not_configured"
    assert (await api.request("DELETE", path, key=tenant.key)).json()["status"] == "removed"


async def test_background_recheck_configures_and_unconfigures(api: Api, tenant: Tenant, dns: DnsServer) -> None:
    path = f"{API}/tenant/preview-domain"
    assert (await api.request("PUT", path, key=tenant.key, json={"preview_domain": "acme.test"})).status_code == 200
    await trio.sleep(0.5)
    assert (await api.request("GET", path, key=tenant.key)).json()["status"] == "pending_dns"
    point(dns, "acme.test")
    configured = await wait_status(api, tenant, path, "configured")  # no verify call: the background re-check
    assert configured["dns_status"] == "verified"
    dns.records.clear()  # the records are gone: a verify sends it back to pending
    again = await api.request("POST", f"{path}/verify", key=tenant.key)
    assert again.json()["status"] == "pending_dns"
    dns.silent = True  # DNS not answering is no verdict: the state stays
    point(dns, "acme.test")
    await api.request("POST", f"{path}/verify", key=tenant.key)  # pending stays pending
    dns.silent = False
    assert (await wait_status(api, tenant, path, "configured"))["dns_status"] == "verified"
    dns.silent = True
    kept = (await api.request("POST", f"{path}/verify", key=tenant.key)).json()
    assert kept["status"] == "configured" and "did not answer" in kept["dns_error"]


async def test_workspace_and_project_domains(api: Api, tenant: Tenant, dns: DnsServer) -> None:
    point(dns, "tenant.test")
    point(dns, "team.test")
    ws_path = f"{API}/workspaces/{tenant.workspace_id}/preview-domain"
    project_path = f"{API}/projects/{tenant.project_id}/preview-domain"
    assert (await api.request("GET", ws_path, key=tenant.key)).json()["default_domain"] == "corral.localhost"
    await api.request("PUT", f"{API}/tenant/preview-domain", key=tenant.key, json={"preview_domain": "tenant.test"})
    await wait_status(api, tenant, f"{API}/tenant/preview-domain", "configured")
    inherited = (await api.request("GET", project_path, key=tenant.key)).json()
    assert inherited["status"] == "not_configured" and inherited["default_domain"] == "tenant.test"

    put = await api.request("PUT", ws_path, key=tenant.key, json={"preview_domain": "team.test"})
    assert put.status_code == 200 and put.json()["status"] == "pending_dns" and put.json()["default_domain"] == "tenant.test"
    assert (await api.request("GET", f"{ws_path}/verify", key=tenant.key)).json()["status"] == "configured"
    assert (await api.request("GET", project_path, key=tenant.key)).json()["default_domain"] == "team.test"

    assert (await api.request("PUT", project_path, key=tenant.key, json={"preview_domain": "proj.test"})).status_code == 200
    verify = await api.request("GET", f"{project_path}/verify", key=tenant.key)
    assert verify.json()["preview_domain"] == "proj.test" and verify.json()["status"] == "pending_dns"
    bad = await api.request("PUT", project_path, key=tenant.key, json={"preview_domain": "https://proj.test"})
    assert_error(bad, 422, "invalid_domain")
    missing = await api.request("PUT", ws_path, key=tenant.key, json={})
    assert_error(missing, 400, "MISSING_PARAM")
    removed = await api.request("DELETE", project_path, key=tenant.key)
    assert removed.json() == {"preview_domain": None, "status": "removed"}
    assert_error(await api.request("GET", f"{API}/projects/not-a-uuid/preview-domain", key=tenant.key), 400, "INVALID_ID")
    nobody = "00000000-0000-4000-8000-000000000000"
    assert_error(await api.request("GET", f"{API}/workspaces/{nobody}/preview-domain", key=tenant.key), 404, "NOT_FOUND")


async def test_roles_and_domain_ownership(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    _, member = await member_key(api, tenant, "member")
    path = f"{API}/tenant/preview-domain"
    assert (await api.request("GET", path, key=member)).status_code == 200
    assert_error(await api.request("PUT", path, key=member, json={"preview_domain": "acme.test"}), 403, "FORBIDDEN")
    assert_error(await api.request("DELETE", path, key=member), 403, "FORBIDDEN")
    ws_path = f"{API}/workspaces/{tenant.workspace_id}/preview-domain"
    assert_error(await api.request("PUT", ws_path, key=member, json={"preview_domain": "acme.test"}), 403, "FORBIDDEN")
    assert (await api.request("PUT", path, key=tenant.key, json={"preview_domain": "acme.test"})).status_code == 200
    taken = await api.request("PUT", f"{API}/tenant/preview-domain", key=other_tenant.key, json={"preview_domain": "acme.test"})
    assert assert_error(taken, 409, "DOMAIN_TAKEN")["message"] == "has already been taken"


async def test_tenant_not_found(api: Api, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec's 404 for a tenant that is gone. Keys of a deleted tenant are refused (401)
    before any route runs, so the lookup itself is made to miss here."""
    from corral.http.routes import preview_domains

    async def no_tenant(db: object, tenant_id: str) -> None:
        return None

    monkeypatch.setattr(preview_domains.tenancy, "get_tenant", no_tenant)
    for method in ("GET", "PUT", "DELETE"):
        response = await api.request(method, f"{API}/tenant/preview-domain", key=tenant.key, json={"preview_domain": "acme.test"})
        assert assert_error(response, 404, "NOT_FOUND")["message"] == "tenant not found"
