"""Helpers for the custom-domain tests: a server whose DNS checks ask a test DNS server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.dns_server import DnsServer, dns_server
from tests.support import RUNTIME_SETTINGS, Api, Tenant, running_server

API = "/api/v1"
SERVICE_DOMAIN = "corral.localhost"


@contextlib.asynccontextmanager
async def domain_server(tmp_path_factory: pytest.TempPathFactory, **overrides: Any) -> AsyncIterator[tuple[Api, DnsServer]]:
    """A server running real instances, asking `dns` for CNAMEs; its instances destroyed afterwards."""
    async with dns_server() as dns:
        settings = {**RUNTIME_SETTINGS, "dns_servers": dns.address, **overrides}
        async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
            try:
                yield api, dns
            finally:
                driver = await api.platform.runtime.driver()
                for info in await driver.instances():
                    await driver.destroy(info.id)


async def new_computer(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "Domain Computer")
    body.setdefault("template_type", "svc-desktop")
    response = await api.request("POST", f"{API}/computers", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    computer: dict[str, Any] = response.json()
    return computer


async def add_domain(api: Api, tenant: Tenant, computer_id: str, fqdn: str) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/computers/{computer_id}/domains", key=tenant.key, json={"domain": fqdn})
    assert response.status_code == 201, response.text
    domain: dict[str, Any] = response.json()["data"]
    return domain


async def verify(api: Api, tenant: Tenant, domain_id: str) -> httpx.Response:
    return await api.request("POST", f"{API}/custom-domains/{domain_id}/verify", key=tenant.key)


async def router_get(api: Api, host: str, path: str = "/", **headers: str) -> httpx.Response:
    """A request to the preview router for `host`."""
    port = api.platform.settings.preview_port
    async with httpx.AsyncClient(timeout=15, follow_redirects=False) as client:
        return await client.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host, **headers})
