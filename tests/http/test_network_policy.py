"""Network policy routes (contract §11) on real instances: a sandbox talks to servers
in a namespace standing in for the internet, names resolve through the node's DNS
forwarder (which asks a test DNS server), and the policy decides what gets through."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

from tests.dns_server import DnsServer
from tests.http import computer_support
from tests.net.internet import PROBE, Internet, internet
from tests.support import API, RUNTIME_SETTINGS, Api, Tenant, assert_error, running_server

from .test_sandboxes import create, run

RESOLVE = "import socket, sys\ntry: print(socket.gethostbyname(sys.argv[1]))\nexcept OSError as exc: print('failed', exc)\n"


@pytest.fixture
async def policy_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory, dns: DnsServer) -> AsyncIterator[Api]:
    """A server running real instances whose DNS forwarder asks the test DNS server."""
    settings: dict[str, Any] = {**RUNTIME_SETTINGS, "dns_servers": dns.address}
    async with running_server(tmp_path_factory.mktemp("corral"), **settings) as client:
        try:
            yield client
        finally:
            driver = await client.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


@pytest.fixture
async def owner(policy_api: Api) -> Tenant:
    """A fresh tenant on this module's server (not the shared `runtime_api`'s)."""
    return await policy_api.create_tenant()


@pytest.fixture
def world() -> Iterator[Internet]:
    with internet() as inet:
        yield inet


async def prepare(api: Api, tenant: Tenant, sandbox_id: str) -> None:
    for name, script in (("probe", PROBE), ("resolve", RESOLVE)):
        encoded = base64.b64encode(script.encode()).decode()
        await run(api, tenant, sandbox_id, f"echo {encoded} | base64 -d > /tmp/{name}.py")


async def reaches(api: Api, tenant: Tenant, sandbox_id: str, host: str, port: int, protocol: str = "tcp") -> bool:
    result = await run(api, tenant, sandbox_id, f"python3 /tmp/probe.py {host} {port} {protocol}")
    return str(result["stdout"]).startswith("hello")


async def resolves(api: Api, tenant: Tenant, sandbox_id: str, name: str) -> str:
    return str((await run(api, tenant, sandbox_id, f"python3 /tmp/resolve.py {name}"))["stdout"]).strip()


async def put_policy(api: Api, tenant: Tenant, path: str, **body: Any) -> dict[str, Any]:
    response = await api.request("PUT", f"{API}/{path}/network-policy", key=tenant.key, json=body)
    assert response.status_code == 200, response.text
    policy: dict[str, Any] = response.json()["data"]
    return policy


async def within_a_second(check: Any, expected: bool) -> None:
    """New connections follow a change within one second."""
    with trio.fail_after(1.5):
        while await check() != expected:
            await trio.sleep(0.1)


async def test_modes_block_and_allow_by_address_port_and_hostname(
    policy_api: Api, owner: Tenant, world: Internet, dns: DnsServer
) -> None:
    api = policy_api
    a, b = world.addresses
    dns.addresses = {"api.example.test": [a], "other.example.test": [b]}
    sandbox = await create(api, owner)
    sid = sandbox["id"]
    await prepare(api, owner, sid)
    gateway = str((await run(api, owner, sid, "cat /etc/resolv.conf"))["stdout"])
    assert gateway.startswith("nameserver ") and gateway.strip().endswith(".1")  # the node's forwarder

    got = await api.request("GET", f"{API}/sandboxes/{sid}/network-policy", key=owner.key)
    assert got.status_code == 200
    assert got.json()["data"] == {"sandbox_id": sid, "mode": "unrestricted", "rules": [], "updated_at": sandbox["created_at"]}
    assert await reaches(api, owner, sid, "api.example.test", 8080) and await reaches(api, owner, sid, b, 9090)

    # allowlist: a hostname on one port, an address with every port (udp only).
    policy = await put_policy(
        api, owner, f"sandboxes/{sid}", mode="allowlist",
        rules=[{"host": "API.example.test", "port": 8080, "protocol": "tcp"}, {"host": f"{b}/32", "protocol": "udp"}],
    )
    assert policy["mode"] == "allowlist" and policy["sandbox_id"] == sid
    assert policy["rules"] == [
        {"host": "api.example.test", "port": 8080, "protocol": "tcp"}, {"host": f"{b}/32", "port": None, "protocol": "udp"},
    ]
    await within_a_second(lambda: reaches(api, owner, sid, b, 8080), False)
    assert await resolves(api, owner, sid, "api.example.test") == a
    assert await reaches(api, owner, sid, "api.example.test", 8080)
    assert not await reaches(api, owner, sid, a, 9090)
    assert await reaches(api, owner, sid, b, 9090, "udp")
    assert await resolves(api, owner, sid, "other.example.test") == b  # DNS itself is always allowed
    got = await api.request("GET", f"{API}/sandboxes/{sid}/network-policy", key=owner.key)
    assert got.json()["data"] == policy

    # denylist: an address on one port, a hostname on every port.
    await put_policy(api, owner, f"sandboxes/{sid}", mode="denylist", rules=[{"host": a, "port": 9090}, {"host": "other.example.test"}])
    await within_a_second(lambda: reaches(api, owner, sid, a, 8080), True)
    assert not await reaches(api, owner, sid, a, 9090)
    assert not await reaches(api, owner, sid, "other.example.test", 8080)

    # isolated: nothing leaves but DNS to the forwarder; it survives a stop and a start.
    await put_policy(api, owner, f"sandboxes/{sid}", mode="isolated")
    await within_a_second(lambda: reaches(api, owner, sid, a, 8080), False)
    assert await resolves(api, owner, sid, "api.example.test") == a
    for action in ("stop", "start"):
        response = await api.request("POST", f"{API}/sandboxes/{sid}/{action}", key=owner.key)
        assert response.status_code == 200, response.text
    await prepare(api, owner, sid)
    assert not await reaches(api, owner, sid, a, 8080)

    deleted = await api.request("DELETE", f"{API}/sandboxes/{sid}/network-policy", key=owner.key)
    assert deleted.status_code == 200 and deleted.json() == {"data": {"sandbox_id": sid, "mode": "unrestricted"}}
    await within_a_second(lambda: reaches(api, owner, sid, a, 8080), True)


async def test_computer_routes_validation_and_other_tenants(policy_api: Api, owner: Tenant) -> None:
    api = policy_api
    other = await api.create_tenant("Other")
    response = await api.request("POST", f"{API}/computers", key=owner.key, json={"name": "c", "template_type": "svc-desktop"})
    assert response.status_code == 201, response.text
    cid = response.json()["id"]
    sandbox = await create(api, owner)
    path = f"{API}/computers/{cid}/network-policy"

    got = await api.request("GET", path, key=owner.key)
    assert got.status_code == 200 and got.json()["data"]["mode"] == "unrestricted" and got.json()["data"]["computer_id"] == cid
    put = await api.request("PUT", path, key=owner.key, json={"mode": "denylist", "rules": [{"host": "10.0.0.0/8"}]})
    assert put.status_code == 200, put.text
    assert put.json()["data"]["rules"] == [{"host": "10.0.0.0/8", "port": None, "protocol": "any"}]
    assert (await api.request("GET", path, key=owner.key)).json()["data"] == put.json()["data"]

    for base in (f"computers/{cid}", f"sandboxes/{sandbox['id']}"):
        url = f"{API}/{base}/network-policy"
        error = assert_error(await api.request("PUT", url, key=owner.key, json={"rules": []}), 400, "MISSING_PARAM")
        assert error["message"] == "mode is required"
        error = assert_error(await api.request("PUT", url, key=owner.key, json={"mode": "allowlist"}), 400, "MISSING_PARAM")
        assert error["message"] == "rules required for allowlist/denylist mode"
        error = assert_error(await api.request("PUT", url, key=owner.key, json={"mode": "open"}), 422, "VALIDATION_ERROR")
        assert "mode" in error["details"]
        bad_rules = [{"host": "ok.example", "port": 70000}, {"host": "1.2.3.4", "protocol": "icmp", "path": "/x"}, {"port": 80}]
        error = assert_error(await api.request("PUT", url, key=owner.key, json={"mode": "denylist", "rules": bad_rules}), 422, "VALIDATION_ERROR")
        assert set(error["details"]) == {"rules[0].port", "rules[1].protocol", "rules[1].path", "rules[2].host"}
        assert_error(await api.request("PUT", url, key=owner.key, content=b"{nope"), 400, "INVALID_BODY")

    # Another tenant sees neither the computer's nor the sandbox's policy.
    for method in ("GET", "PUT", "DELETE"):
        body = {"json": {"mode": "isolated"}} if method == "PUT" else {}
        assert_error(await api.request(method, path, key=other.key, **body), 404, "COMPUTER_NOT_FOUND")
        url = f"{API}/sandboxes/{sandbox['id']}/network-policy"
        assert_error(await api.request(method, url, key=other.key, **body), 404, "NOT_FOUND")
    assert (await api.request("GET", path, key=owner.key)).json()["data"]["mode"] == "denylist"

    deleted = await api.request("DELETE", path, key=owner.key)
    assert deleted.json() == {"data": {"computer_id": cid, "mode": "unrestricted"}}
    assert (await api.request("GET", path, key=owner.key)).json()["data"]["rules"] == []


async def test_an_isolated_computer_reaches_nothing_but_dns(policy_api: Api, owner: Tenant, world: Internet, dns: DnsServer) -> None:
    api = policy_api
    a, _ = world.addresses
    dns.addresses = {"api.example.test": [a]}
    cid = str((await computer_support.create_running(api, owner))["id"])
    encoded = base64.b64encode(PROBE.encode()).decode()
    await computer_support.run(api, owner, cid, f"echo {encoded} | base64 -d > /tmp/probe.py")

    async def reaches_a() -> bool:
        result = await computer_support.run(api, owner, cid, "python3 /tmp/probe.py api.example.test 8080 tcp")
        return str(result["output"]).startswith("hello")

    assert await reaches_a()
    put = await api.request("PUT", f"{API}/computers/{cid}/network-policy", key=owner.key, json={"mode": "isolated"})
    assert put.status_code == 200 and put.json()["data"]["mode"] == "isolated" and put.json()["data"]["rules"] == []
    await within_a_second(reaches_a, False)
    resolved = await computer_support.run(api, owner, cid, "getent hosts api.example.test")
    assert resolved["output"].startswith(a)  # DNS through the forwarder still works

    for action in ("stop", "start"):  # the policy comes back with the instance
        response = await api.request("POST", f"{API}/computers/{cid}/{action}", key=owner.key)
        assert response.status_code in (200, 202), response.text
        await computer_support.wait_for(api, owner, cid, "stopped" if action == "stop" else "running", passing=("running", "stopping", "stopped", "starting", "provisioning"))
    await computer_support.run(api, owner, cid, f"echo {encoded} | base64 -d > /tmp/probe.py")
    assert not await reaches_a()

    deleted = await api.request("DELETE", f"{API}/computers/{cid}/network-policy", key=owner.key)
    assert deleted.status_code == 200
    await within_a_second(reaches_a, True)
