"""A tenant looking for the node's private networks (contract §18): from a sandbox, every
private range (RFC 1918, CGNAT) is closed on every port, not only on 80 and 443 that
the egress proxy judges; other instances, the node's own addresses and link-local are
closed too, and stay closed when `CORRAL_ALLOW_PRIVATE_DESTINATIONS=1` opens the
private ranges. What the platform gives instances keeps working: DNS through the
node's forwarder, HTTPS through the egress proxy, the tenant's own database, and the
sandbox's network policy.

The LAN is a namespace on the host (`tests.security.lan`) with a server in each
private range on ports that are neither 80 nor 443; the host itself reaches it, so a
refusal is the platform's doing."""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.dns_server import DnsServer
from tests.http.database_support import DATABASE_SETTINGS, credentials, running_db
from tests.http.pg_wire_client import SOURCE as PG_CLIENT
from tests.net.egress_support import INTERNET, internet
from tests.security.support import create, run
from tests.support import (
    API,
    RUNTIME_SETTINGS,
    Api,
    Tenant,
    destroy_instances_and_databases,
    running_server,
)

from .lan import (
    GATEWAY,
    OWN_ADDRESS,
    PORTS,
    PROBE_ALL,
    Lan,
    default_route_address,
    host_listener,
    host_reaches,
    lan,
    targets,
)

METADATA = "169.254.169.254"
CURL = "curl -sS --max-time 10"


@pytest.fixture
def private_lan() -> Iterator[Lan]:
    with lan() as found:
        for address in (*found.addresses, found.link_local):  # the node itself reaches its LAN
            assert host_reaches(address, PORTS[0]).startswith("hello"), address
        yield found


@pytest.fixture
async def closed_api(
    runtime_host: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, dns: DnsServer
) -> AsyncIterator[Api]:
    """A node as it runs by default, whose egress proxy may reach one test server (the
    stand-in for the internet, `CORRAL_EGRESS_ALLOWED_DESTINATIONS`), with databases."""
    async with internet(tmp_path) as bundle:
        settings: dict[str, Any] = {
            **DATABASE_SETTINGS, "dns_servers": dns.address, "ca_bundle": bundle,
            "egress_allowed_destinations": (f"{INTERNET}/32",),
        }
        async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
            try:
                yield api
            finally:
                await destroy_instances_and_databases(api.platform)


@pytest.fixture
async def open_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory, dns: DnsServer) -> AsyncIterator[Api]:
    """A node started with CORRAL_ALLOW_PRIVATE_DESTINATIONS=1."""
    settings: dict[str, Any] = {**RUNTIME_SETTINGS, "dns_servers": dns.address, "allow_private_destinations": True}
    async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
        try:
            yield api
        finally:
            await destroy_instances_and_databases(api.platform)






async def put_file(api: Api, tenant: Tenant, sandbox_id: str, path: str, content: str) -> None:
    encoded = base64.b64encode(content.encode()).decode()
    result = await run(api, tenant, sandbox_id, f"echo {encoded} | base64 -d > {path}")
    assert result["exit_code"] == 0, result


async def probe(api: Api, tenant: Tenant, sandbox_id: str, *items: tuple[str, str, int]) -> dict[str, str]:
    """What the sandbox gets from each (protocol, host, port), tried at once."""
    result = await run(api, tenant, sandbox_id, f"python3 /tmp/probe.py {shlex.quote(targets(*items))}")
    assert result["exit_code"] == 0, result
    found: dict[str, str] = json.loads(result["stdout"])
    return found


async def sandbox_serving(api: Api, tenant: Tenant) -> tuple[str, str]:
    """A sandbox with a web server on port 8000; (its id, its address)."""
    sandbox_id = await create(api, tenant)
    response = await api.request(
        "POST", f"{API}/sandboxes/{sandbox_id}/processes", key=tenant.key,
        json={"cmd": "mkdir -p /tmp/site && cd /tmp/site && echo page > index.html && exec python3 -m http.server 8000"},
    )
    assert response.status_code == 201, response.text
    with trio.fail_after(15):
        while "page" not in (await run(api, tenant, sandbox_id, "curl -s localhost:8000/"))["stdout"]:
            await trio.sleep(0.2)
    return sandbox_id, (await run(api, tenant, sandbox_id, OWN_ADDRESS))["stdout"].strip()


async def prober(api: Api, tenant: Tenant) -> tuple[str, str]:
    """A sandbox ready to probe; (its id, the node's address on its bridge)."""
    sandbox_id = await create(api, tenant)
    await put_file(api, tenant, sandbox_id, "/tmp/probe.py", PROBE_ALL)
    gateway = (await run(api, tenant, sandbox_id, GATEWAY))["stdout"].strip()
    assert gateway, "the sandbox names the node's DNS forwarder"
    return sandbox_id, gateway


def the_platform(api: Api, private_lan: Lan, gateway: str, other_address: str, node_port: int) -> list[tuple[str, str, int]]:
    """Destinations that are the platform itself or never a tenant's: another sandbox, the
    node's own addresses (its bridge address, its address on the LAN, its default route's),
    link-local (a server on the LAN's link-local network, metadata)."""
    node = (gateway, private_lan.host_addresses[0], default_route_address())
    return [
        ("tcp", other_address, 8000),
        *(("tcp", address, node_port) for address in node),
        ("tcp", gateway, api.platform.settings.port),
        ("tcp", private_lan.link_local, PORTS[0]),
        ("udp", private_lan.link_local, PORTS[0]),
        ("tcp", METADATA, 8080),
    ]


def answered(outcome: dict[str, str]) -> dict[str, str]:
    """The destinations that answered (a refusal reads `refused: <why>`)."""
    return {key: value for key, value in outcome.items() if not value.startswith("refused")}


async def test_private_ranges_are_closed_on_every_port(closed_api: Api, private_lan: Lan, dns: DnsServer) -> None:
    api = closed_api
    dns.addresses = {"lan.example.test": [private_lan.addresses[0]], "api.example.test": [INTERNET]}
    tenant = await api.create_tenant()
    _, other_address = await sandbox_serving(api, tenant)
    sandbox_id, gateway = await prober(api, tenant)

    async with host_listener() as node_port:
        assert await trio.to_thread.run_sync(host_reaches, private_lan.host_addresses[0], node_port) == "hello-host"
        lan_targets = [(p, a, port) for a in private_lan.addresses for port in PORTS for p in ("tcp", "udp")]
        outcome = await probe(api, tenant, sandbox_id, *lan_targets, *the_platform(api, private_lan, gateway, other_address, node_port))
    assert len(outcome) == len(lan_targets) + 8
    assert answered(outcome) == {}, outcome
    by_name = await probe(api, tenant, sandbox_id, ("tcp", "lan.example.test", PORTS[0]))
    assert answered(by_name) == {}, by_name
    # Ports 80 and 443 go to the egress proxy, which refuses them too.
    through_proxy = await run(api, tenant, sandbox_id, f"{CURL} --noproxy '*' http://{private_lan.addresses[1]}/")
    assert json.loads(through_proxy["stdout"])["error"]["code"] == "EGRESS_DENIED", through_proxy

    # What instances are given still works: DNS, HTTPS through the proxy, the tenant's database.
    looked_up = await run(api, tenant, sandbox_id, "getent hosts lan.example.test api.example.test")
    assert looked_up["stdout"].split()[::2] == [private_lan.addresses[0], INTERNET], looked_up
    fetched = await run(api, tenant, sandbox_id, f"{CURL} https://api.example.test/from-sandbox")
    assert fetched["exit_code"] == 0 and json.loads(fetched["stdout"])["target"] == "/from-sandbox", fetched
    database = await running_db(api, tenant, name="own", auto_suspend_seconds=0)
    creds = await credentials(api, tenant, database["id"])
    await put_file(api, tenant, sandbox_id, "/tmp/pgc.py", PG_CLIENT)
    queried = await run(api, tenant, sandbox_id, f"python3 /tmp/pgc.py {shlex.quote(creds['internal_url'])} 'SELECT 40 + 2'")
    assert queried["exit_code"] == 0 and queried["stdout"].strip() == "42", queried


async def test_the_setting_opens_private_ranges_but_never_the_platform(open_api: Api, private_lan: Lan, dns: DnsServer) -> None:
    api = open_api
    dns.addresses = {"lan.example.test": [private_lan.addresses[0]]}
    tenant = await api.create_tenant()
    _, other_address = await sandbox_serving(api, tenant)
    sandbox_id, gateway = await prober(api, tenant)

    async with host_listener() as node_port:
        lan_targets = [(p, a, port) for a in private_lan.addresses for port in PORTS for p in ("tcp", "udp")]
        outcome = await probe(api, tenant, sandbox_id, *lan_targets)
        assert all(outcome[f"{p}:{a}:{port}"].startswith("hello") for p, a, port in lan_targets), outcome
        by_name = await probe(api, tenant, sandbox_id, ("tcp", "lan.example.test", 6379))
        assert by_name == {"tcp:lan.example.test:6379": f"hello {private_lan.addresses[0]}:6379"}
        platform = await probe(api, tenant, sandbox_id, *the_platform(api, private_lan, gateway, other_address, node_port))
    assert len(platform) == 8 and answered(platform) == {}, platform

    # The sandbox's network policy still decides within what the setting opens.
    a, b = private_lan.addresses[:2]
    response = await api.request(
        "PUT", f"{API}/sandboxes/{sandbox_id}/network-policy", key=tenant.key,
        json={"mode": "allowlist", "rules": [{"host": a, "port": 6379, "protocol": "tcp"}]},
    )
    assert response.status_code == 200, response.text
    with trio.fail_after(5):
        while (await probe(api, tenant, sandbox_id, ("tcp", b, 6379)))[f"tcp:{b}:6379"].startswith("hello"):
            await trio.sleep(0.2)
    allowed = await probe(api, tenant, sandbox_id, ("tcp", a, 6379), ("tcp", a, 8080), ("udp", a, 6379))
    assert answered(allowed) == {f"tcp:{a}:6379": f"hello {a}:6379"}, allowed
    # A policy cannot open what the platform closes.
    response = await api.request(
        "PUT", f"{API}/sandboxes/{sandbox_id}/network-policy", key=tenant.key,
        json={"mode": "allowlist", "rules": [{"host": "0.0.0.0/0"}]},
    )
    assert response.status_code == 200, response.text
    await trio.sleep(1)
    assert answered(await probe(api, tenant, sandbox_id, ("tcp", other_address, 8000), ("tcp", METADATA, 8080))) == {}
    dns_answer = await run(api, tenant, sandbox_id, "getent hosts lan.example.test")
    assert dns_answer["stdout"].split()[:1] == [private_lan.addresses[0]], dns_answer
