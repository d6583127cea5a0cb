"""Host networking for real: bridge, netns, veth, nftables; attach, detach, cleanup."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.net import HostNetwork, NetworkConfig, NetworkPolicy
from tests.support import host_names

LISTEN = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind((sys.argv[1], 7000)); s.listen()\n"
    "print('listening', flush=True)\n"
    "c, _ = s.accept(); c.sendall(b'hello'); c.close()\n"
)
NAMES = host_names(
    bridge="corralnt0",
    subnet_prefix="10.214",
    nft_table="corral_nettest",
    link_letter="n",
    netns_prefix="corraln",
    cgroup_parent="corral-nettest",
)
BRIDGE = NAMES["bridge"]
TABLE = NAMES["nft_table"]
NET = NAMES["subnet"].rsplit(".", 1)[0]
"""The first three octets of this session's range, like "10.214.0"."""


def sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True)


@pytest.fixture
async def network(tmp_path: Path) -> AsyncIterator[HostNetwork]:
    if os.geteuid() != 0:
        pytest.fail("network tests need root (tools/test runs as root)")
    net = HostNetwork(
        NetworkConfig(
            state_dir=tmp_path,
            bridge=BRIDGE,
            subnet=NAMES["subnet"],
            nft_table=TABLE,
            link_prefix=NAMES["link_prefix"],
            netns_prefix=NAMES["netns_prefix"],
        )
    )
    await net.setup()
    try:
        yield net
    finally:
        await net.teardown()
        net.close()
    assert not os.path.exists(f"/sys/class/net/{BRIDGE}")
    assert sh("nft", "list", "table", "inet", TABLE).returncode != 0


async def test_setup_is_idempotent(network: HostNetwork) -> None:
    await network.setup()
    await network.setup()
    addresses = sh("ip", "-4", "-o", "addr", "show", "dev", BRIDGE).stdout
    assert addresses.count(f"{NET}.1/24") == 1
    ruleset = sh("nft", "list", "table", "inet", TABLE).stdout
    assert "masquerade" in ruleset and "map egress" in ruleset
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"


async def test_attach_detach(network: HostNetwork) -> None:
    instance_id = str(uuid.uuid4())
    attachment = await network.attach(instance_id)
    assert attachment.address == f"{NET}.2" and attachment.gateway == f"{NET}.1"
    assert os.path.exists(attachment.netns_path)
    link = sh("ip", "-d", "link", "show", attachment.host_link).stdout
    assert f"master {BRIDGE}" in link and "isolated on" in link
    inside = sh("ip", "-n", attachment.netns, "-4", "-o", "addr").stdout
    assert f"{NET}.2/24" in inside
    assert f"default via {NET}.1" in sh("ip", "-n", attachment.netns, "route").stdout
    # The host reaches a server inside the namespace over the bridge.
    server = subprocess.Popen(
        ["ip", "netns", "exec", attachment.netns, sys.executable, "-c", LISTEN, attachment.address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        with socket.create_connection((attachment.address, 7000), timeout=2) as conn:
            assert conn.recv(5) == b"hello"
    finally:
        server.kill()
        server.wait()
    ruleset = sh("nft", "list", "table", "inet", TABLE).stdout
    assert attachment.chain in ruleset and f"{NET}.2 : jump " + attachment.chain in ruleset

    again = await network.attach(instance_id)  # idempotent: same address, the pieces kept as they are
    assert again.address == attachment.address

    await network.detach(instance_id)
    assert not os.path.exists(attachment.netns_path)
    assert not os.path.exists(f"/sys/class/net/{attachment.host_link}")
    assert attachment.chain not in sh("nft", "list", "table", "inet", TABLE).stdout
    assert network.addresses.lookup(instance_id) is None
    await network.detach(instance_id)  # idempotent


def link_index(name: str) -> int:
    return int(Path(f"/sys/class/net/{name}/ifindex").read_text())


def rule_handles(chain: str) -> list[str]:
    listing = sh("nft", "-a", "list", "chain", "inet", TABLE, chain).stdout
    return [line.rsplit("# handle ", 1)[1] for line in listing.splitlines() if "# handle " in line]


async def test_attach_again_keeps_what_is_as_made_and_remakes_what_is_not(network: HostNetwork) -> None:
    """An instance started again finds its network as its last boot left it: the same
    veth and chain are kept (no delete, no rewrite); a piece that is not as made (the
    host end off the bridge, an address changed inside, a policy changed meanwhile) is
    made again."""
    instance_id = str(uuid.uuid4())
    first = await network.attach(instance_id)
    index, handles = link_index(first.host_link), rule_handles(first.chain)
    assert "corral-policy " in sh("nft", "list", "chain", "inet", TABLE, first.chain).stdout

    again = await network.attach(instance_id)
    assert link_index(again.host_link) == index and rule_handles(again.chain) == handles

    sh("ip", "link", "set", first.host_link, "nomaster")
    await network.attach(instance_id)
    remade = link_index(first.host_link)
    assert remade != index
    link = sh("ip", "-d", "link", "show", first.host_link).stdout
    assert f"master {BRIDGE}" in link and "isolated on" in link

    sh("ip", "-n", first.netns, "addr", "add", f"{NET}.99/24", "dev", "eth0")
    await network.attach(instance_id)
    assert link_index(first.host_link) != remade
    assert sh("ip", "-n", first.netns, "-4", "-o", "addr", "show", "dev", "eth0").stdout.count("inet ") == 1

    # A policy set while the instance was detached from its chain's rules: rewritten.
    network._policies[instance_id] = NetworkPolicy("isolated")
    await network.attach(instance_id)
    assert rule_handles(first.chain) != handles and "reject" in sh("nft", "list", "chain", "inet", TABLE, first.chain).stdout
    # And one applied that the chain already holds is not written again.
    handles = rule_handles(first.chain)
    assert await network.apply_policy(instance_id, NetworkPolicy("isolated"))
    assert rule_handles(first.chain) == handles
    await network.detach(instance_id)


async def test_cleanup_stale(network: HostNetwork) -> None:
    keep, stale = str(uuid.uuid4()), str(uuid.uuid4())
    kept = await network.attach(keep)
    gone = await network.attach(stale)
    removed = await network.cleanup_stale({keep})
    assert any(stale in item for item in removed)
    assert os.path.exists(kept.netns_path) and not os.path.exists(gone.netns_path)
    assert not os.path.exists(f"/sys/class/net/{gone.host_link}")
    ruleset = sh("nft", "list", "table", "inet", TABLE).stdout
    assert kept.chain in ruleset and gone.chain not in ruleset
    assert network.addresses.lookup(stale) is None and network.addresses.lookup(keep) is not None
