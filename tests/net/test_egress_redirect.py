"""Transparent egress for real: nftables sends a namespace's ports 80 and 443 to the proxy.

An instance's network (namespace, veth, chain) from `HostNetwork.attach`, and an
"internet" namespace of the test's own with an HTTP and an HTTPS server; `curl
--noproxy '*'` in the instance's namespace still goes through the proxy, and
HTTPS verifies with the node's egress CA.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from corral.net import Attachment, HostNetwork, NetworkConfig
from corral.net.egress import (
    DestinationPolicy,
    EgressCA,
    EgressProxy,
    EgressProxyConfig,
    EgressRedirect,
    RedirectConfig,
)
from tests.net.egress_support import Recording, echo_server
from tests.support import TEST_SLOT, free_port, host_names

NAMES = host_names(
    bridge="corralet",
    subnet_prefix="10.219",
    nft_table="corral_egtest",
    link_letter="e",
    netns_prefix="corrale",
    cgroup_parent="corral-egtest",
)
INTERNET_HOST = f"10.220.{TEST_SLOT}.1"
INTERNET = f"10.220.{TEST_SLOT}.2"
INTERNET_NETNS = f"{NAMES['netns_prefix']}internet"


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


@dataclass
class World:
    network: HostNetwork
    instance: Attachment
    proxy: EgressProxy
    hooks: Recording
    ca: EgressCA


def server_tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """The internet server's TLS: a CA of its own (the proxy is given it as CORRAL_CA_BUNDLE); leaves by SNI."""
    test_ca = EgressCA(tmp_path / "internet-ca")
    context = test_ca.context_for(INTERNET)

    def by_name(sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: ssl.SSLContext) -> None:
        if name:
            sslobj.context = test_ca.context_for(name)

    context.sni_callback = by_name
    return context, str(test_ca.cert_path)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    if os.geteuid() != 0:
        pytest.fail("egress tests need root (tools/test runs as root)")
    subprocess.run(["ip", "netns", "delete", INTERNET_NETNS], capture_output=True)
    network = HostNetwork(
        NetworkConfig(
            state_dir=tmp_path / "network",
            bridge=NAMES["bridge"],
            subnet=NAMES["subnet"],
            nft_table=NAMES["nft_table"],
            link_prefix=NAMES["link_prefix"],
            netns_prefix=NAMES["netns_prefix"],
        )
    )
    await network.setup()
    outside, inside = f"{NAMES['link_prefix']}inet", f"{NAMES['link_prefix']}inetp"
    try:
        sh("ip", "netns", "add", INTERNET_NETNS)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", INTERNET_NETNS)
        sh("ip", "addr", "add", f"{INTERNET_HOST}/24", "dev", outside)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "-n", INTERNET_NETNS, "addr", "add", f"{INTERNET}/24", "dev", inside)
        sh("ip", "-n", INTERNET_NETNS, "link", "set", inside, "up")
        sh("ip", "-n", INTERNET_NETNS, "link", "set", "lo", "up")
        sh("ip", "-n", INTERNET_NETNS, "route", "add", "default", "via", INTERNET_HOST)
        instance = await network.attach(str(uuid.uuid4()))
        tls, bundle = server_tls(tmp_path)
        ca = EgressCA(tmp_path / "egress-ca")
        hooks = Recording(deny=["denied.test"])
        port = free_port()
        destinations = DestinationPolicy.build(False, [f"{INTERNET}/32"])
        proxy = EgressProxy(EgressProxyConfig(network.gateway, port, destinations, ca_bundle=bundle), ca, hooks)
        redirect = EgressRedirect(RedirectConfig(NAMES["nft_table"], NAMES["bridge"], NAMES["subnet"], network.gateway, port))
        await redirect.install()
        await redirect.install()  # idempotent
        netns = f"/run/netns/{INTERNET_NETNS}"
        async with (
            trio.open_nursery() as nursery,
            echo_server(INTERNET, port=80, netns=netns),
            echo_server(INTERNET, port=443, netns=netns, tls=tls),
        ):
            await nursery.start(proxy.serve)
            yield World(network, instance, proxy, hooks, ca)
            nursery.cancel_scope.cancel()
        await redirect.remove()
    finally:
        subprocess.run(["ip", "link", "delete", outside], capture_output=True)
        subprocess.run(["ip", "netns", "delete", INTERNET_NETNS], capture_output=True)
        subprocess.run(["nft", "delete", "table", "ip", f"{NAMES['nft_table']}_egress"], capture_output=True)
        await network.teardown()
        network.close()


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
    entry = world.hooks.entries[-1]
    assert (entry.info.mode, entry.info.scheme, entry.info.host, entry.info.port) == ("transparent", "http", INTERNET, 80)
    assert entry.info.client_address == world.instance.address
    assert entry.info.destination_address == INTERNET


async def test_https_is_proxied_transparently_and_verifies_with_the_node_ca(world: World) -> None:
    ca = str(world.ca.cert_path)
    echoed = await curl(world, "--noproxy", "*", "--cacert", ca, "--resolve", f"api.test:443:{INTERNET}", "https://api.test/v1")
    assert echoed["target"] == "/v1"
    assert echoed["headers"]["host"] == "api.test"  # type: ignore[index]
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
    assert [e.info.mode for e in world.hooks.entries[-2:]] == ["explicit", "explicit"]


async def test_denied_and_forbidden_destinations_answer_the_instance(world: World) -> None:
    denied = await curl(world, "--noproxy", "*", "--resolve", f"denied.test:80:{INTERNET}", "http://denied.test/")
    assert denied["error"]["code"] == "EGRESS_DENIED"  # type: ignore[index]
    # the gateway's other addresses and the metadata address are refused on the connected address
    refused = await curl(world, "--noproxy", "*", "http://169.254.169.254/latest/meta-data/")
    assert refused["error"]["code"] == "EGRESS_DENIED"  # type: ignore[index]
    assert world.hooks.entries[-1].decision.rejected_by == "destination"
