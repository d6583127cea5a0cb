"""Which domain a sandbox's preview URLs use, and that the router serves every one of them.

Runs on SQLite and PostgreSQL: the preview SQL (exposures, shares, domains) is the
same on both stores.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.dns_server import DnsServer, dns_server
from tests.http.preview_support import (
    API,
    expose,
    new_sandbox,
    preview_token,
    router,
    share,
    start_app,
    wait_ready,
)
from tests.pg_server import create_database
from tests.support import RUNTIME_SETTINGS, Api, running_server

ROUTER_HOST = "preview.corral.localhost"


@pytest.fixture(params=["sqlite", "postgresql"])
async def api(request: pytest.FixtureRequest, runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    database_url = ""
    if request.param == "postgresql":
        database_url = create_database(request.getfixturevalue("postgres_url"), f"previews_{uuid.uuid4().hex[:12]}")
    async with dns_server() as dns, running_server(
        tmp_path_factory.mktemp("corral"), database_url, dns_servers=dns.address, **RUNTIME_SETTINGS
    ) as client:
        try:
            yield client, dns
        finally:
            driver = await client.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def configure(api: Api, key: str, path: str, domain: str, dns: DnsServer) -> None:
    dns.records[f"*.{domain}"] = ROUTER_HOST
    dns.records[f"*.sandbox.{domain}"] = ROUTER_HOST
    assert (await api.request("PUT", path, key=key, json={"preview_domain": domain})).status_code == 200
    verified = await api.request("GET", f"{path}/verify", key=key)
    assert verified.json()["status"] == "configured", verified.text


async def test_project_then_workspace_then_tenant_then_the_service_domain(api: tuple[Api, DnsServer]) -> None:
    client, dns = api
    tenant = await client.create_tenant()
    workspace = (await client.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Team"})).json()["data"]
    project = (await client.request("POST", f"{API}/projects", key=tenant.key, json={"name": "App", "workspace_id": workspace["id"]})).json()["data"]
    sandbox = await new_sandbox(client, tenant, workspace_id=workspace["id"], project_id=project["id"])
    sid, slug, port = sandbox["id"], sandbox["slug"], client.platform.settings.preview_port
    await start_app(client, tenant, sid, 8000)

    def url(domain: str) -> str:
        return f"http://8000-{slug}.sandbox.{domain}:{port}"

    assert await expose(client, tenant, sid, 8000) == url("corral.localhost")
    await wait_ready(client, sid, 8000)
    await configure(client, tenant.key, f"{API}/tenant/preview-domain", "acme-tenant.test", dns)
    assert await expose(client, tenant, sid, 8000) == url("acme-tenant.test")
    await configure(client, tenant.key, f"{API}/workspaces/{workspace['id']}/preview-domain", "acme-team.test", dns)
    assert await expose(client, tenant, sid, 8000) == url("acme-team.test")
    # Pending domains do not take over URLs until their DNS is verified.
    await client.request("PUT", f"{API}/projects/{project['id']}/preview-domain", key=tenant.key, json={"preview_domain": "acme-app.test"})
    assert await expose(client, tenant, sid, 8000) == url("acme-team.test")
    await configure(client, tenant.key, f"{API}/projects/{project['id']}/preview-domain", "acme-app.test", dns)
    assert await expose(client, tenant, sid, 8000) == url("acme-app.test")
    link = await share(client, tenant, sid)
    assert link["url"].startswith(url("acme-app.test") + "/?ms=ms_")

    token = await preview_token(client, tenant, sid)
    async with router(client) as http:
        # Every domain of the sandbox serves it, the service-managed one included.
        for domain in ("acme-app.test", "acme-team.test", "acme-tenant.test", "corral.localhost"):
            response = await http.get("/", headers={"Host": f"8000-{slug}.sandbox.{domain}", "X-Preview-Token": token})
            assert response.status_code == 200 and "Hello from the sandbox" in response.text, domain

        assert (await client.request("DELETE", f"{API}/projects/{project['id']}/preview-domain", key=tenant.key)).status_code == 200
        assert await expose(client, tenant, sid, 8000) == url("acme-team.test")
        gone = await http.get("/", headers={"Host": f"8000-{slug}.sandbox.acme-app.test", "X-Preview-Token": token})
        assert gone.status_code == 404

        # Another tenant's domain never serves this sandbox.
        other = await client.create_tenant("Other")
        await configure(client, other.key, f"{API}/tenant/preview-domain", "other.test", dns)
        foreign = await http.get("/", headers={"Host": f"8000-{slug}.sandbox.other.test", "X-Preview-Token": token})
        assert foreign.status_code == 404
