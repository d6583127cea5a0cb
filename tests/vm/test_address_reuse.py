"""Instances that come and go quickly, with the bridge's ports (and, once the range wraps, addresses) reused.

Each new veth used to change what the host and the instances believed about
layer 2: the bridge took the lowest MAC of its ports (so instances cached a gateway
MAC that vanished with another instance's veth), and an address moved to a veth
with a new MAC while the host's neighbour entry still held the old one. Either way
the agent "did not answer" for several seconds. These tests churn instances and
check every first call answers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable

import trio

from corral.net.links import mac_for
from corral.vm import AgentClient, NamespaceDriver
from tests.vm.conftest import BRIDGE, new_spec

LIFECYCLES = 120
IN_FLIGHT = 8


def link_mac(name: str, netns: str | None = None) -> str:
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    out = subprocess.run([*prefix, "-o", "link", "show", name], capture_output=True, text=True, check=True).stdout
    return out.split("link/ether ", 1)[1].split()[0]


async def test_macs_are_fixed_by_address(driver: NamespaceDriver) -> None:
    before = link_mac(BRIDGE)
    first = await driver.create(new_spec())
    second = await driver.create(new_spec())
    assert first.address and second.address
    assert link_mac(BRIDGE) == before == mac_for(driver.network.gateway)
    netns = driver.network.netns_name(first.id)
    assert link_mac("eth0", netns) == mac_for(first.address)
    await driver.stop(first.id)
    again = await driver.start(first.id)
    assert again.address == first.address and link_mac("eth0", netns) == mac_for(first.address)
    await driver.destroy(second.id)
    assert link_mac(BRIDGE) == before


async def test_churn_every_first_call_answers(driver: NamespaceDriver) -> None:
    """Create, use, stop, start, use, destroy: `LIFECYCLES` times, `IN_FLIGHT` at once."""
    failures: list[str] = []
    addresses: set[str] = set()

    async def use(info_address: str | None, what: str, call: Awaitable[object]) -> None:
        try:
            with trio.fail_after(20):
                await call
        except Exception as exc:  # every failure is collected and reported at the end
            failures.append(f"{what} at {info_address}: {exc!r}")

    async def lifecycle(n: int, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            info = await driver.create(new_spec())
            assert info.address
            addresses.add(info.address)
            async with AgentClient.for_instance(info) as agent:
                await use(info.address, f"#{n} first exec", agent.exec("true"))
                await use(info.address, f"#{n} spawn", agent.spawn("sleep 300"))
                await use(info.address, f"#{n} write", agent.write_file("/workspace/n", str(n).encode()))
            await driver.stop(info.id)
            info = await driver.start(info.id)
            async with AgentClient.for_instance(info) as agent:
                await use(info.address, f"#{n} exec after start", agent.exec("cat /workspace/n"))
            await driver.destroy(info.id)

    limiter = trio.CapacityLimiter(IN_FLIGHT)
    async with trio.open_nursery() as nursery:
        for n in range(LIFECYCLES):
            nursery.start_soon(lifecycle, n, limiter)
    assert failures == []
    # Handed out round-robin (`corral.net.addresses`): no address came back while the
    # range had others free; the bridge's ports were reused all along.
    assert len(addresses) == LIFECYCLES
