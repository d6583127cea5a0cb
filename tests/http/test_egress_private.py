"""The egress proxy on a node started for local development (issue 26, parts 3 and 4):
`CORRAL_DNS_SERVERS` names a test name server, `CORRAL_CA_BUNDLE` a test CA and
`CORRAL_ALLOW_PRIVATE_DESTINATIONS=1` opens private addresses.

A namespace stands in for the developer's LAN (`tests/net/egress_support.internet`: a
private address with HTTP on 80 and HTTPS on 443, its certificates from a CA made by the
test). Real sandboxes use the proxy as a user's program would (`curl` with the proxy
variables the instance has, or redirected by nftables): a name resolves for the proxy as
for the instance, HTTPS to it is verified against the bundle, secrets are substituted
towards it; and the platform itself (other instances, the node's addresses, its
services) is never a destination, whatever the setting says.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from corral.net.dns_forwarder import MIN_TTL
from tests.dns_server import DnsServer
from tests.net.egress_support import INTERNET, INTERNET_HOST, internet
from tests.support import (
    API,
    RUNTIME_SETTINGS,
    Api,
    destroy_instances_and_databases,
    running_server,
)

from .test_egress_node import audit_rows, egress
from .test_sandbox_processes import start
from .test_sandboxes import create, run

CURL = "curl -sS --max-time 10"
OWN_ADDRESS = (
    "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
    " s.connect(('192.0.2.1', 9)); print(s.getsockname()[0])\""
)


@pytest.fixture
async def lan_api(
    runtime_host: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, dns: DnsServer
) -> AsyncIterator[Api]:
    """A node as a developer starts it against a private test world."""
    async with internet(tmp_path) as bundle:
        settings: dict[str, Any] = {
            **RUNTIME_SETTINGS, "dns_servers": dns.address, "ca_bundle": bundle, "allow_private_destinations": True,
        }
        async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
            try:
                yield api
            finally:
                await destroy_instances_and_databases(api.platform)


def denied(result: dict[str, Any]) -> bool:
    """curl printed the proxy's refusal (403 EGRESS_DENIED), not a page."""
    try:
        return bool(json.loads(result["stdout"])["error"]["code"] == "EGRESS_DENIED")
    except (ValueError, KeyError, TypeError):
        return False


async def test_https_to_a_name_of_the_configured_name_server(lan_api: Api, dns: DnsServer) -> None:
    """The proxy resolves as the instance does, and verifies the upstream against CORRAL_CA_BUNDLE."""
    api = lan_api
    dns.addresses = {"api.example.test": [INTERNET]}
    tenant = await api.create_tenant()
    sid = (await create(api, tenant))["id"]
    value = "sk_live_" + "7" * 24
    secret = await egress(api, tenant, "POST", "/secrets", {
        "name": "lan", "value": value, "type": "api_key", "scope": "tenant", "allowed_hosts": ["api.example.test"],
    })
    binding = await egress(api, tenant, "POST", "/bindings", {
        "secret_id": secret["data"]["id"], "resource_id": sid, "resource_type": "sandbox", "expose_as_env": "LAN_KEY",
    })
    placeholder = binding["data"]["placeholder_token"]
    looked_up = await run(api, tenant, sid, "getent hosts api.example.test")
    assert looked_up["stdout"].split()[:1] == [INTERNET], looked_up

    for url, target in (("https://api.example.test/x", "/x"), ("http://api.example.test/y?z=1", "/y?z=1")):
        for how in ("", "--noproxy '*'"):  # the proxy variables as set (CONNECT, absolute form), and redirected
            result = await run(api, tenant, sid, f"{CURL} {how} {url}")
            assert result["exit_code"] == 0, (url, how, result)
            assert json.loads(result["stdout"])["target"] == target, (url, how, result)

    # A secret bound to the sandbox, allowed towards that host: substituted over HTTPS.
    url = f"ws://127.0.0.1:{api.platform.settings.port}{API}/egress/audit/resource/{sid}?token={tenant.key}"
    async with open_websocket_url(url, subprotocols=["svc-egress-audit-v1"]) as tail:
        sent = await run(api, tenant, sid, f'{CURL} -H "Authorization: Bearer $LAN_KEY" https://api.example.test/echo')
        assert sent["exit_code"] == 0, sent
        # The upstream got the value (it echoes it), the sandbox sees the placeholder again.
        assert json.loads(sent["stdout"])["headers"]["authorization"] == f"Bearer {placeholder}"
        assert value not in sent["stdout"]
        with trio.fail_after(5):
            # Audit rows are written behind the answers: an earlier request's row may
            # still arrive after the tail opened (docs/api.md, write-behind).
            while (frame := json.loads(await tail.get_message())).get("data", {}).get("path") != "/echo":
                pass
    assert frame["type"] == "audit_event"
    assert (frame["data"]["host"], frame["data"]["path"], frame["data"]["status_code"]) == ("api.example.test", "/echo", 200)
    row = (await audit_rows(api, tenant, 5))[0]
    assert (row["host"], row["action"], row["status_code"], row["resource_id"]) == ("api.example.test", "allow", 200, sid)
    assert row["request_transforms"] == [{"type": "placeholder", "header": "authorization", "secret_id": secret["data"]["id"]}]

    # A name the name server does not know fails as it does inside the instance.
    unknown = await run(api, tenant, sid, f"{CURL} https://nowhere.example.test/")
    assert unknown["exit_code"] != 0 and "502" in unknown["stderr"], unknown


async def test_the_platform_is_never_an_egress_destination(lan_api: Api, dns: DnsServer) -> None:
    """Sandbox A reaches neither sandbox B nor the node's services through the proxy, by address
    or by a name resolving to them; a test-world address still answers."""
    api = lan_api
    tenant = await api.create_tenant()
    a = (await create(api, tenant))["id"]
    b = (await create(api, tenant))["id"]
    await run(api, tenant, b, "mkdir -p /workspace/site && echo page-of-b > /workspace/site/index.html")
    await start(api, tenant, b, cmd="exec python3 -u -m http.server 8000", cwd="/workspace/site", name="web")
    with trio.fail_after(15):
        while "page-of-b" not in (await run(api, tenant, b, "curl -s localhost:8000/"))["stdout"]:
            await trio.sleep(0.2)
    b_address = (await run(api, tenant, b, OWN_ADDRESS))["stdout"].strip()
    a_address = (await run(api, tenant, a, OWN_ADDRESS))["stdout"].strip()
    gateway = (await run(api, tenant, a, "awk '/^nameserver/ {print $2}' /etc/resolv.conf"))["stdout"].strip()
    assert b_address and a_address != b_address and gateway
    api_port, proxy_port = api.platform.settings.port, api.platform.settings.egress_port
    dns.addresses = {"b.example.test": [b_address], "node.example.test": [gateway], "api.example.test": [INTERNET]}

    # B's page, through the proxy: by address, by name, as an absolute URL and over CONNECT.
    for url in (f"http://{b_address}:8000/", "http://b.example.test:8000/", f"http://{b_address}/", "http://b.example.test/"):
        result = await run(api, tenant, a, f"curl -sS -m 3 {url}")
        assert denied(result), (url, result)
    for target in (f"{b_address}:8000", "b.example.test:8000"):
        tunnel = await run(api, tenant, a, f"curl -sS -m 3 -p -x http://{gateway}:{proxy_port} http://{target}/")
        assert "page-of-b" not in tunnel["stdout"] and "CONNECT tunnel failed, response 403" in tunnel["stderr"], tunnel
    https = await run(api, tenant, a, "curl -sS -m 3 https://b.example.test:8000/")
    assert "CONNECT tunnel failed, response 403" in https["stderr"], https
    # Without the proxy variables: B is on A's own link, whose bridge ports are isolated.
    for url in (f"http://{b_address}:8000/", "http://b.example.test:8000/", f"http://{b_address}/"):
        direct = await run(api, tenant, a, f"curl -sS -m 3 --noproxy '*' {url}")
        assert direct["exit_code"] != 0 and "page-of-b" not in direct["stdout"], direct

    # The node: its API on loopback, its addresses (the gateway, the test world's side of the
    # link) and a name resolving to one of them.
    for url in (
        f"http://127.0.0.1:{api_port}/healthz",
        f"http://localhost:{api_port}/healthz",
        f"http://{gateway}:{api_port}/healthz",
        f"http://{INTERNET_HOST}:{api_port}/healthz",
        f"http://node.example.test:{api_port}/healthz",
        f"http://{gateway}:53/",
    ):
        result = await run(api, tenant, a, f"env -u NO_PROXY -u no_proxy curl -sS -m 3 {url}")
        assert denied(result), (url, result)
    tunnel = await run(api, tenant, a, f"curl -sS -m 3 -p -x http://{gateway}:{proxy_port} --noproxy '' http://127.0.0.1:{api_port}/healthz")
    assert "CONNECT tunnel failed, response 403" in tunnel["stderr"], tunnel

    # Outside the platform, the setting opens what it says.
    for url in (f"http://{INTERNET}/outside", "http://api.example.test/outside", "https://api.example.test/outside"):
        result = await run(api, tenant, a, f"{CURL} {url}")
        assert result["exit_code"] == 0 and json.loads(result["stdout"])["target"] == "/outside", (url, result)
    # Each refusal is A's audit row (the tunnels that could not be opened too).
    rows = await audit_rows(api, tenant, 17)
    assert len(rows) == 17 and all(r["resource_id"] == a for r in rows)
    refused = [r for r in rows if r["action"] == "reject"]
    assert len(refused) == 14 and all(r["rejected_by"] == "destination" and r["status_code"] == 403 for r in refused)
    hosts = {b_address, "b.example.test", "127.0.0.1", "localhost", gateway, INTERNET_HOST, "node.example.test"}
    assert {r["host"] for r in refused} == hosts
    assert sum(r["method"] is None for r in refused) == 4  # the CONNECTs, no request inside


async def test_a_hostname_rule_follows_the_answers_the_proxy_gets(lan_api: Api, dns: DnsServer) -> None:
    """A name asked of the proxy is judged by the network policy on the address the node's DNS
    forwarder gives it, and that answer refreshes the hostname rule as an instance's own lookup
    does: the rule still matches once the first answer's TTL has run out."""
    api = lan_api
    dns.addresses = {"api.example.test": [INTERNET]}
    dns.ttl = 0  # the forwarder keeps it MIN_TTL seconds
    tenant = await api.create_tenant()
    sid = (await create(api, tenant))["id"]
    rules = [{"host": "api.example.test", "port": 443, "protocol": "tcp"}]
    policy = await api.request("PUT", f"{API}/sandboxes/{sid}/network-policy", key=tenant.key, json={"mode": "allowlist", "rules": rules})
    assert policy.status_code == 200, policy.text
    first = await run(api, tenant, sid, f"{CURL} https://api.example.test/first")
    assert first["exit_code"] == 0 and json.loads(first["stdout"])["target"] == "/first", first
    assert denied(await run(api, tenant, sid, f"{CURL} http://api.example.test/plain"))  # port 80: no rule
    await trio.sleep(MIN_TTL + 1)
    later = await run(api, tenant, sid, f"{CURL} https://api.example.test/later")
    assert later["exit_code"] == 0 and json.loads(later["stdout"])["target"] == "/later", later

    isolated = await api.request("PUT", f"{API}/sandboxes/{sid}/network-policy", key=tenant.key, json={"mode": "isolated"})
    assert isolated.status_code == 200, isolated.text
    with trio.fail_after(5):
        while not denied(await run(api, tenant, sid, f"{CURL} https://api.example.test/isolated")):
            await trio.sleep(0.2)
