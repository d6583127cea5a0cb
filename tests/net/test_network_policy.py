"""Network policy in real nftables with the real DNS forwarder (contract §11).

An attached instance namespace (the host side of an instance, without its
processes) talks to servers in a namespace standing in for the internet; names
resolve through the node's forwarder, which asks a test DNS server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import dns.message as dns_message
import dns.query as dns_query
import dns.rcode as dns_rcode
import pytest
import trio

from corral.net import (
    HOST_NAME,
    HostNetwork,
    NetworkConfig,
    NetworkPolicy,
    PolicyError,
    PolicyRule,
    parse_rules,
)
from tests.dns_server import DnsServer
from tests.net.internet import PORTS, Internet, internet, probe
from tests.support import host_names

NAMES = host_names(
    bridge="corralnp",
    subnet_prefix="10.212",
    nft_table="corral_nptest",
    link_letter="p",
    netns_prefix="corralp",
    cgroup_parent="corral-nptest",
)
RESOLVE = (
    "import socket, sys\n"
    "try: print(socket.gethostbyname(sys.argv[1]))\n"
    "except OSError as exc: print('failed', exc)\n"
)


@pytest.fixture
async def network(tmp_path: Path, dns: DnsServer, nursery: trio.Nursery) -> AsyncIterator[HostNetwork]:
    if os.geteuid() != 0:
        pytest.fail("network tests need root (tools/test runs as root)")
    net = HostNetwork(
        NetworkConfig(
            state_dir=tmp_path,
            bridge=NAMES["bridge"],
            subnet=NAMES["subnet"],
            nft_table=NAMES["nft_table"],
            link_prefix=NAMES["link_prefix"],
            netns_prefix=NAMES["netns_prefix"],
            dns_forwarder=True,
            upstream_dns=(dns.address,),
        ),
        nursery,
    )
    await net.setup()
    try:
        yield net
    finally:
        await net.teardown()
        net.close()


@pytest.fixture
def world() -> AsyncIterator[Internet]:
    with internet() as inet:
        yield inet  # type: ignore[misc]


async def check(netns: str, address: str, port: int, protocol: str = "tcp") -> bool:
    return await trio.to_thread.run_sync(probe, netns, address, port, protocol)


async def resolve(netns: str, name: str) -> str:
    result = await trio.run_process(
        ["ip", "netns", "exec", netns, sys.executable, "-c", RESOLVE, name], capture_stdout=True, check=False
    )
    return result.stdout.decode().strip()


def rule(host: str, port: int | None = None, protocol: str = "any") -> PolicyRule:
    return PolicyRule(host, port, protocol)


async def test_modes_by_address_port_and_protocol(network: HostNetwork, world: Internet) -> None:
    a, b = world.addresses
    attachment = await network.attach(str(uuid.uuid4()))
    ns = attachment.netns
    assert await check(ns, a, 8080) and await check(ns, b, 9090, "udp")  # unrestricted

    await network.apply_policy(attachment.instance_id, NetworkPolicy("allowlist", (rule(a, 8080, "tcp"), rule(f"{b}/32", None, "udp"))))
    assert await check(ns, a, 8080)
    assert not await check(ns, a, 9090)  # another port
    assert not await check(ns, b, 8080)  # another address, tcp
    assert await check(ns, b, 9090, "udp")  # the udp rule, any port
    assert not await check(ns, a, 8080, "udp")  # the tcp rule does not cover udp

    await network.apply_policy(attachment.instance_id, NetworkPolicy("denylist", (rule(a, 9090), rule(f"{b}/32"))))
    assert await check(ns, a, 8080)
    assert not await check(ns, a, 9090) and not await check(ns, a, 9090, "udp")
    assert not await check(ns, b, 8080)

    await network.apply_policy(attachment.instance_id, NetworkPolicy("isolated"))
    assert not await check(ns, a, 8080) and not await check(ns, b, 9090, "udp")

    await network.apply_policy(attachment.instance_id, NetworkPolicy())
    assert await check(ns, a, 8080) and await check(ns, b, 9090)


async def test_hostname_rules_follow_the_forwarders_answers(network: HostNetwork, world: Internet, dns: DnsServer) -> None:
    a, b = world.addresses
    dns.addresses = {"api.example.test": [a], "other.example.test": [b]}
    dns.ttl = 30
    attachment = await network.attach(str(uuid.uuid4()))
    ns = attachment.netns
    assert attachment.dns_servers == (attachment.gateway,)  # what the launcher writes in resolv.conf
    # `ip netns exec` takes /etc/netns/<name>/resolv.conf as the namespace's.
    resolv = Path("/etc/netns") / ns / "resolv.conf"
    resolv.parent.mkdir(parents=True, exist_ok=True)
    resolv.write_text(f"nameserver {attachment.gateway}\n")
    try:
        await _hostname_rules(network, world, attachment.instance_id, ns)
        # What the egress proxy asks about the connections it receives: the same answers.
        a, b = world.addresses
        assert network.allows(attachment.address, b, 9090) is False  # denylisted by name
        assert network.allows(attachment.address, a, 9090) is True
        assert network.allows("192.0.2.99", a, 8080) is False  # not an instance
    finally:
        resolv.unlink()
        resolv.parent.rmdir()


async def _hostname_rules(network: HostNetwork, world: Internet, instance_id: str, ns: str) -> None:
    a, b = world.addresses

    await network.apply_policy(instance_id, NetworkPolicy("allowlist", (rule("api.example.test", 8080),)))
    assert await resolve(ns, "api.example.test") == a
    assert await check(ns, a, 8080)
    assert not await check(ns, a, 9090)
    assert await resolve(ns, "other.example.test") == b
    assert not await check(ns, b, 8080)  # resolved, but not in the policy

    elements = subprocess.run(["nft", "list", "table", "inet", NAMES["nft_table"]], capture_output=True, text=True).stdout
    assert f"{a} timeout 30s" in elements  # kept for the record's TTL

    await network.apply_policy(instance_id, NetworkPolicy("denylist", (rule("other.example.test"),)))
    # The forwarder looks the new name up itself: blocked before the instance asks.
    with trio.fail_after(2):
        while await check(ns, b, 8080):
            await trio.sleep(0.1)
    assert await check(ns, a, 8080)


async def test_policy_survives_stop_and_start(network: HostNetwork, world: Internet) -> None:
    a, _ = world.addresses
    instance_id = str(uuid.uuid4())
    await network.attach(instance_id)
    await network.apply_policy(instance_id, NetworkPolicy("isolated"))
    await network.detach(instance_id)
    assert await network.apply_policy(instance_id, NetworkPolicy("denylist", (rule(a, 8080),))) is False
    attachment = await network.attach(instance_id)
    assert not await check(attachment.netns, a, 8080)
    assert await check(attachment.netns, a, 9090)


async def test_forwarder_answers_over_udp_and_tcp_and_fails_without_upstream(network: HostNetwork, dns: DnsServer) -> None:
    dns.addresses = {"api.example.test": ["192.0.2.7"]}
    query = dns_message.make_query("api.example.test", "A")
    for ask in (dns_query.udp, dns_query.tcp):
        answer = await trio.to_thread.run_sync(lambda ask=ask: ask(query, network.gateway, timeout=3))
        assert [item.address for rrset in answer.answer for item in rrset] == ["192.0.2.7"]
    dns.silent = True
    answer = await trio.to_thread.run_sync(lambda: dns_query.udp(query, network.gateway, timeout=5))
    assert answer.rcode() == dns_rcode.SERVFAIL


async def test_the_forwarder_answers_the_host_name_itself_with_its_gateway(network: HostNetwork, dns: DnsServer) -> None:
    """`host.corral.internal` (a database's `internal_url`) is this node's bridge address,
    answered without asking upstream (which would not know it), even with no upstream
    answering at all; other types of it have no record, and other names go upstream."""
    dns.silent = True
    for ask in (dns_query.udp, dns_query.tcp):
        answer = await trio.to_thread.run_sync(lambda ask=ask: ask(dns_message.make_query(HOST_NAME, "A"), network.gateway, timeout=3))
        assert [item.address for rrset in answer.answer for item in rrset] == [network.gateway]
        assert answer.rcode() == dns_rcode.NOERROR
    other_type = await trio.to_thread.run_sync(lambda: dns_query.udp(dns_message.make_query(HOST_NAME, "AAAA"), network.gateway, timeout=3))
    assert (other_type.rcode(), other_type.answer) == (dns_rcode.NOERROR, [])
    upstream = await trio.to_thread.run_sync(lambda: dns_query.udp(dns_message.make_query("api.example.test", "A"), network.gateway, timeout=5))
    assert upstream.rcode() == dns_rcode.SERVFAIL  # asked upstream, which is silent


def test_policy_decisions_in_python() -> None:
    allow = NetworkPolicy("allowlist", (rule("api.example.test", 443, "tcp"), rule("10.0.0.0/8", None, "udp")))
    assert allow.allows("1.2.3.4", 443, "tcp", ["api.example.test"])
    assert not allow.allows("1.2.3.4", 443, "tcp")  # not an address answered for the name
    assert not allow.allows("1.2.3.4", 80, "tcp", ["api.example.test"])
    assert allow.allows("10.9.9.9", 53, "udp") and not allow.allows("10.9.9.9", 53, "tcp")
    deny = NetworkPolicy("denylist", (rule("1.2.3.4/32", 80),))
    assert not deny.allows("1.2.3.4", 80) and deny.allows("1.2.3.4", 443) and deny.allows("5.6.7.8", 80)
    assert not NetworkPolicy("isolated").allows("1.2.3.4", 443) and NetworkPolicy().allows("1.2.3.4", 443)


def test_rule_validation() -> None:
    assert parse_rules([{"host": "10.0.0.1"}, {"host": "Example.COM", "port": 443, "protocol": "tcp"}]) == (
        PolicyRule("10.0.0.1/32"), PolicyRule("example.com", 443, "tcp"),
    )
    assert parse_rules([{"host": "10.1.2.3/8"}])[0].host == "10.0.0.0/8"
    with pytest.raises(PolicyError) as caught:
        parse_rules([{"host": "x", "port": 0}, {"host": "bad host!", "protocol": "icmp", "path": "/"}, "no"])
    assert caught.value.details == {
        "rules[0].port": "must be an integer from 1 to 65535",
        "rules[1].host": "must be a hostname, an IP or a CIDR block",
        "rules[1].protocol": "must be tcp, udp or any",
        "rules[1].path": "is not a rule field (host, port, protocol)",
        "rules[2]": "must be an object with host, port, protocol",
    }
    with pytest.raises(PolicyError):
        parse_rules([{"port": 70000}])
    assert PORTS == (8080, 9090)
