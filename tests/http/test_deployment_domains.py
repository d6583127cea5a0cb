"""A deployment's URLs follow the preview-domain precedence, and the router serves them
on a configured preview domain as soon as it is verified (and not after it is removed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from tests.dns_server import DnsServer, dns_server
from tests.http.deploy_support import deployment, exec_in, new_sandbox, publish, router
from tests.support import API, RUNTIME_SETTINGS, Api, running_server

pytestmark = pytest.mark.slow
ROUTER_HOST = "preview.corral.localhost"


@pytest.fixture
async def api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with dns_server() as dns, running_server(tmp_path_factory.mktemp("corral"), dns_servers=dns.address, **RUNTIME_SETTINGS) as client:
        try:
            yield client, dns
        finally:
            driver = await client.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def fetch(api: Api, host: str) -> int:
    async with router(api) as client:
        return (await client.get("/", headers={"Host": f"{host}:{api.platform.settings.preview_port}"})).status_code


async def test_a_tenant_preview_domain_names_and_serves_deployments(api: tuple[Api, DnsServer]) -> None:
    client, dns = api
    tenant = await client.create_tenant()
    sandbox = await new_sandbox(client, tenant)
    await exec_in(client, tenant, sandbox["id"], "mkdir -p /workspace/s && printf hi > /workspace/s/index.html")
    dep = await deployment(client, tenant)
    assert (await publish(client, tenant, dep["id"], sandbox["id"], output_path="/workspace/s")).status_code == 200
    assert await fetch(client, f"{dep['slug']}.acme.test") == 404  # not a domain of this tenant yet

    dns.records["*.acme.test"] = ROUTER_HOST
    dns.records["*.sandbox.acme.test"] = ROUTER_HOST
    path = f"{API}/tenant/preview-domain"
    assert (await client.request("PUT", path, key=tenant.key, json={"preview_domain": "acme.test"})).status_code == 200
    assert (await client.request("GET", f"{path}/verify", key=tenant.key)).json()["status"] == "configured"
    got = (await client.request("GET", f"{API}/deployments/{dep['id']}", key=tenant.key)).json()["data"]
    assert got["public_url"].startswith(f"http://{dep['slug']}.acme.test")
    with trio.fail_after(10):
        while await fetch(client, f"{dep['slug']}.acme.test") != 200:
            await trio.sleep(0.05)
    assert await fetch(client, f"v1-{dep['slug']}.acme.test") == 200
    assert await fetch(client, f"{dep['slug']}.corral.localhost") == 200  # the service's domain always works

    assert (await client.request("DELETE", path, key=tenant.key)).status_code == 200
    with trio.fail_after(10):
        while await fetch(client, f"{dep['slug']}.acme.test") != 404:
            await trio.sleep(0.05)
