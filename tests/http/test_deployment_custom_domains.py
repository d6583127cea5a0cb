"""Custom domains of deployments (contract §12): attached through the nested and flat routes,
verified by DNS, served by the router as the deployment's own host (its active version),
certified by the edge's question, reached over HTTPS through the edge, and removed with
the deployment."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from corral.net.edge import edge_config, internal_root
from tests.dns_server import DnsServer
from tests.http.domain_support import API, SERVICE_DOMAIN, domain_server, router_get, verify
from tests.http.edge_support import edge_server, https_get, names_in, served_certificate
from tests.http.preview_support import new_sandbox
from tests.support import Api, Tenant, assert_error

pytestmark = pytest.mark.slow


@pytest.fixture
async def server(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with domain_server(tmp_path_factory) as found:
        yield found


async def deployment(api: Api, tenant: Tenant) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/projects/{tenant.project_id}/deployments", key=tenant.key, json={"name": "site"})
    assert response.status_code == 201, response.text
    found: dict[str, Any] = response.json()["data"]
    return found


async def published(api: Api, tenant: Tenant, text: str) -> dict[str, Any]:
    dep = await deployment(api, tenant)
    sandbox = await new_sandbox(api, tenant)
    command = f"mkdir -p /workspace/site && printf '<h1>{text}</h1>' > /workspace/site/index.html"
    ran = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/exec", key=tenant.key, json={"command": command})
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text
    body = {"source_sandbox_id": sandbox["id"], "output_path": "/workspace/site"}
    publish = await api.request("POST", f"{API}/deployments/{dep['id']}/publish", key=tenant.key, json=body, timeout=300)
    assert publish.status_code == 200, publish.text
    return dep


async def ask(api: Api, name: str) -> int:
    return (await api.request("GET", f"{API}/tls/ask", params={"domain": name})).status_code


async def test_a_deployment_domain_serves_its_active_version(server: tuple[Api, DnsServer]) -> None:
    api, dns = server
    tenant = await api.create_tenant()
    dep = await published(api, tenant, "hello from a domain")
    response = await api.request("POST", f"{API}/deployments/{dep['id']}/domains", key=tenant.key, json={"domain": "www.site-test.example"})
    assert response.status_code == 201, response.text
    domain = response.json()["data"]
    assert domain["deployment_id"] == dep["id"] and domain["computer_id"] is None
    assert domain["workspace_id"] == dep["workspace_id"] and domain["project_id"] == dep["project_id"]
    assert domain["verification_target"] == f"{dep['slug']}.{SERVICE_DOMAIN}"
    listed = await api.request("GET", f"{API}/custom-domains", key=tenant.key, params={"deployment_id": dep["id"]})
    assert listed.json() == {"data": [domain], "total": 1}
    nested = await api.request("GET", f"{API}/deployments/{dep['id']}/domains", key=tenant.key)
    assert nested.json() == {"data": [domain], "total": 1}

    assert (await router_get(api, "www.site-test.example")).status_code == 404
    dns.records["www.site-test.example"] = domain["verification_target"]
    verified = await api.request("POST", f"{API}/deployments/{dep['id']}/domains/{domain['id']}/verify", key=tenant.key)
    assert verified.status_code == 200, verified.text
    page = await router_get(api, "www.site-test.example")
    assert page.status_code == 200 and page.text == "<h1>hello from a domain</h1>"
    assert await ask(api, "www.site-test.example") == 200
    assert await ask(api, f"{dep['slug']}.{SERVICE_DOMAIN}") == 200

    other = await api.create_tenant("Other")
    for method, path in (
        ("GET", f"/deployments/{dep['id']}/domains"),
        ("POST", f"/deployments/{dep['id']}/domains/{domain['id']}/verify"),
        ("DELETE", f"/deployments/{dep['id']}/domains/{domain['id']}"),
    ):
        assert_error(await api.request(method, API + path, key=other.key), 404, "DEPLOYMENT_NOT_FOUND")
    assert_error(await verify(api, other, domain["id"]), 404, "DOMAIN_NOT_FOUND")

    deleted = await api.request("DELETE", f"{API}/deployments/{dep['id']}", key=tenant.key)
    assert deleted.status_code == 200, deleted.text
    with trio.fail_after(10):
        while await ask(api, "www.site-test.example") != 404:
            await trio.sleep(0.05)
    assert (await router_get(api, "www.site-test.example")).status_code == 404
    assert_error(await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key), 404, "DOMAIN_NOT_FOUND")


@pytest.fixture
async def edge(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with edge_server(tmp_path_factory, acme_ca="internal") as found:
        yield found


async def test_a_new_user_reaches_their_deployment_over_https(edge: tuple[Api, DnsServer]) -> None:
    """Publish, attach a domain, point DNS at it, verify, open it over HTTPS through the edge:
    the certificate is the domain's, the page is the site, the domain is active and the
    deployment's public_url names it."""
    api, dns = edge
    tenant = await api.create_tenant()
    dep = await published(api, tenant, "over https")
    response = await api.request("POST", f"{API}/custom-domains", key=tenant.key, json={"domain": "shop.site-test.example", "deployment_id": dep["id"]})
    assert response.status_code == 201, response.text
    domain = response.json()["data"]
    dns.records["shop.site-test.example"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200

    root = internal_root(edge_config(api.platform.settings))
    with trio.fail_after(30):
        while not root.exists():
            await trio.sleep(0.1)
    roots = ssl.create_default_context(cafile=str(root))
    page = await https_get(api, "shop.site-test.example", roots)
    assert page.status_code == 200 and page.text == "<h1>over https</h1>"
    assert names_in(await served_certificate(api, "shop.site-test.example", roots)) == {"shop.site-test.example"}
    with trio.fail_after(10):
        while (await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key)).json()["data"]["status"] != "active":
            await trio.sleep(0.05)
    got = (await api.request("GET", f"{API}/deployments/{dep['id']}", key=tenant.key)).json()["data"]
    assert got["public_url"] == "https://shop.site-test.example"
    own = await https_get(api, f"{dep['slug']}.{SERVICE_DOMAIN}", roots)  # its own host too
    assert own.status_code == 200 and own.text == "<h1>over https</h1>"
