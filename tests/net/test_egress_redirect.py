"""Transparent egress for real: nftables sends a namespace's ports 80 and 443 to the proxy.

An instance's network (namespace, veth, chain) from `HostNetwork.attach`, and an
"internet" namespace of the test's own with an HTTP and an HTTPS server; `curl
--noproxy '*'` in the instance's namespace still goes through the proxy, and
HTTPS verifies with the node's egress CA.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from corral.net import Attachment, HostNetwork, NetworkConfig
from corral.net.egress import DestinationPolicy, EgressCA, EgressProxy, EgressProxyConfig
from tests.net.egress_support import INTERNET, Recording, internet
from tests.support import free_port, host_names

NAMES = host_names(
    bridge="corralet",
    subnet_prefix="10.219",
    nft_table="corral_egtest",
    link_letter="e",
    netns_prefix="corrale",
    cgroup_parent="corral-egtest",
)
@dataclass
class World:
    network: HostNetwork
    instance: Attachment
    proxy: EgressProxy
    hooks: Recording
    ca: EgressCA


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    if os.geteuid() != 0:
        pytest.fail("egress tests need root (tools/test runs as root)")
    port = free_port()
    network = HostNetwork(
        NetworkConfig(
            state_dir=tmp_path / "network",
            bridge=NAMES["bridge"],
            subnet=NAMES["subnet"],
            nft_table=NAMES["nft_table"],
            link_prefix=NAMES["link_prefix"],
            netns_prefix=NAMES["netns_prefix"],
            egress_port=port,
        )
    )
    await network.setup()
    assert network.redirect is not None
    await network.redirect.install()  # idempotent: one input rule, one table
    rules = subprocess.run(["nft", "list", "chain", "inet", NAMES["nft_table"], "input"], capture_output=True, text=True).stdout
    assert rules.count("corral-egress-proxy") == 1
    try:
        async with internet(tmp_path) as bundle:
            instance = await network.attach(str(uuid.uuid4()))
            ca = EgressCA(tmp_path / "egress-ca")
            hooks = Recording(deny=["denied.test"])
            destinations = DestinationPolicy.build(False, [f"{INTERNET}/32"])
            proxy = EgressProxy(EgressProxyConfig(network.gateway, port, destinations, ca_bundle=bundle), ca, hooks)
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.serve)
                yield World(network, instance, proxy, hooks, ca)
                nursery.cancel_scope.cancel()
    finally:
        await network.teardown()
        network.close()
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert f"{NAMES['nft_table']}_egress" not in tables


async def curl(world: World, *args: str) -> dict[str, object]:
    result = await trio.run_process(
        ["ip", "netns", "exec", world.instance.netns, "curl", "-sS", "--max-time", "10", *args],
        capture_stdout=True, capture_stderr=True, check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


async def test_a_program_ignoring_proxy_variables_is_still_proxied(world: World) -> None:
    echoed = await curl(world, "--noproxy", "*", f"http://{INTERNET}/plain?q=1")
    assert echoed["target"] == "/plain?q=1"
    await world.hooks.wait(1)
    entry = world.hooks.entries[-1]
    assert (entry.info.mode, entry.info.scheme, entry.info.host, entry.info.port) == ("transparent", "http", INTERNET, 80)
    assert entry.info.client_address == world.instance.address
    assert entry.info.destination_address == INTERNET


async def test_https_is_proxied_transparently_and_verifies_with_the_node_ca(world: World) -> None:
    ca = str(world.ca.cert_path)
    echoed = await curl(world, "--noproxy", "*", "--cacert", ca, "--resolve", f"api.test:443:{INTERNET}", "https://api.test/v1")
    assert echoed["target"] == "/v1"
    assert echoed["headers"]["host"] == "api.test"  # type: ignore[index]
    await world.hooks.wait(1)
    entry = world.hooks.entries[-1]
    assert (entry.info.mode, entry.info.scheme, entry.info.host, entry.info.port) == ("transparent", "https", "api.test", 443)
    # by address, without SNI, the leaf names the address
    echoed = await curl(world, "--noproxy", "*", "--cacert", ca, f"https://{INTERNET}/by-ip")
    assert echoed["target"] == "/by-ip"
    # and without the node's CA the instance does not trust it
    result = await trio.run_process(
        ["ip", "netns", "exec", world.instance.netns, "curl", "-sS", "--noproxy", "*", "--max-time", "10", f"https://{INTERNET}/"],
        capture_stdout=True, capture_stderr=True, check=False,
    )
    assert result.returncode == 60, result.stderr  # CURLE_PEER_FAILED_VERIFICATION


async def test_explicit_proxy_variables_work_too(world: World) -> None:
    proxy = f"http://{world.network.gateway}:{world.proxy.bound_port}"
    echoed = await curl(world, "--proxy", proxy, f"http://{INTERNET}/explicit")
    assert echoed["target"] == "/explicit"
    echoed = await curl(world, "--proxy", proxy, "--cacert", str(world.ca.cert_path), f"https://{INTERNET}/tunnel")
    assert echoed["target"] == "/tunnel"
    await world.hooks.wait(2)
    assert [e.info.mode for e in world.hooks.entries[-2:]] == ["explicit", "explicit"]


async def test_denied_and_forbidden_destinations_answer_the_instance(world: World) -> None:
    denied = await curl(world, "--noproxy", "*", "--resolve", f"denied.test:80:{INTERNET}", "http://denied.test/")
    assert denied["error"]["code"] == "EGRESS_DENIED"  # type: ignore[index]
    # the gateway's other addresses and the metadata address are refused on the connected address
    refused = await curl(world, "--noproxy", "*", "http://169.254.169.254/latest/meta-data/")
    assert refused["error"]["code"] == "EGRESS_DENIED"  # type: ignore[index]
    assert world.hooks.entries[-1].decision.rejected_by == "destination"
