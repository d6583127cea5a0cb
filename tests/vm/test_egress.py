"""A real instance behind the egress proxy: the variables and the CA are there from boot,
a program ignoring the variables is proxied anyway, and HTTPS verifies with the system store."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from corral.net import HostNetwork, NetworkConfig
from corral.net.egress import DestinationPolicy, EgressCA, EgressProxy, EgressProxyConfig
from corral.vm import (
    AgentClient,
    CgroupV1,
    EgressTrust,
    InstanceInfo,
    NamespaceDriver,
    TemplateStore,
)
from tests.net.egress_support import INTERNET, Recording, internet
from tests.support import free_port
from tests.vm.conftest import (
    BRIDGE,
    CGROUP_PARENT,
    LINK_PREFIX,
    NETNS_PREFIX,
    SUBNET,
    TABLE,
    new_spec,
)


@dataclass
class Setup:
    driver: NamespaceDriver
    instance: InstanceInfo
    hooks: Recording
    gateway: str
    port: int


@pytest.fixture
async def setup(data_root: Path, template_store: TemplateStore, tmp_path: Path) -> AsyncIterator[Setup]:
    port = free_port()
    data_dir = data_root / f"egress-{uuid.uuid4().hex[:8]}"
    network = HostNetwork(
        NetworkConfig(
            state_dir=data_dir,
            bridge=BRIDGE,
            subnet=SUBNET,
            nft_table=TABLE,
            link_prefix=LINK_PREFIX,
            netns_prefix=NETNS_PREFIX,
            egress_port=port,
        )
    )
    ca = EgressCA(data_dir / "egress-ca")
    driver = NamespaceDriver(
        data_dir, template_store, network, CgroupV1(parent=CGROUP_PARENT),
        egress=EgressTrust(port, ca.cert_pem.decode()),
    )
    await network.setup()
    hooks = Recording()
    try:
        async with internet(tmp_path) as bundle, trio.open_nursery() as nursery:
            destinations = DestinationPolicy.build(False, [f"{INTERNET}/32"])
            proxy = EgressProxy(EgressProxyConfig(network.gateway, port, destinations, ca_bundle=bundle), ca, hooks)
            await nursery.start(proxy.serve)
            instance = await driver.create(new_spec())
            try:
                yield Setup(driver, instance, hooks, network.gateway, port)
            finally:
                await driver.destroy(instance.id)
                nursery.cancel_scope.cancel()
    finally:
        assert network.redirect is not None
        await network.redirect.remove()
        await driver.aclose()
        network.close()


async def run(setup: Setup, command: str) -> str:
    async with AgentClient.for_instance(setup.instance) as agent:
        result = await agent.exec(command, timeout=30)
    assert result.exit_code == 0, (command, result.stdout, result.stderr)
    return result.stdout


async def test_an_instance_uses_the_proxy_and_trusts_its_ca_from_boot(setup: Setup) -> None:
    proxy = f"http://{setup.gateway}:{setup.port}"
    assert await run(setup, "printf %s \"$HTTPS_PROXY\"") == proxy
    assert await run(setup, "printf %s \"$HTTP_PROXY\"") == proxy
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        path = await run(setup, f"printf %s \"${name}\"")
        assert "BEGIN CERTIFICATE" in await run(setup, f"cat {path}"), name
    await run(setup, f"echo '{INTERNET} api.test' >> /etc/hosts")

    # curl ignoring the proxy variables, HTTPS with the system store only: redirected, verified
    echoed = json.loads(await run(setup, "curl -sS --noproxy '*' --max-time 10 https://api.test/direct"))
    assert echoed["target"] == "/direct"
    await setup.hooks.wait(1)
    assert setup.hooks.entries[-1].info.mode == "transparent"
    assert setup.hooks.entries[-1].info.client_address == setup.instance.address

    # Python honouring HTTPS_PROXY (CONNECT), trusting the CA through the system store
    script = f"import urllib.request; print(urllib.request.urlopen('https://{INTERNET}/py', timeout=10).read().decode())"
    echoed = json.loads(await run(setup, f'python3 -c "{script}"'))
    assert echoed["target"] == "/py"
    await setup.hooks.wait(2)
    assert setup.hooks.entries[-1].info.mode == "explicit"

    # plain HTTP with the variables cleared is still proxied
    echoed = json.loads(await run(setup, f"env -u http_proxy -u HTTP_PROXY curl -sS --max-time 10 http://{INTERNET}/plain"))
    assert echoed["target"] == "/plain"
    await setup.hooks.wait(3)
    assert setup.hooks.entries[-1].info.mode == "transparent"


async def test_the_ca_survives_a_restart_without_being_added_twice(setup: Setup) -> None:
    await setup.driver.stop(setup.instance.id)
    await setup.driver.start(setup.instance.id)
    count = await run(setup, "grep -c 'BEGIN CERTIFICATE' /usr/local/share/ca-certificates/corral-egress.crt")
    assert count.strip() == "1"
    bundle = await run(setup, "cat /etc/ssl/certs/ca-certificates.crt")
    pem = (await run(setup, "cat /usr/local/share/ca-certificates/corral-egress.crt")).strip()
    assert bundle.count(pem) == 1
