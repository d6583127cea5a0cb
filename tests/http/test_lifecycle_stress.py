"""Hundreds of instance lifecycles in overlapping waves, bridge ports reused.

Addresses are handed out round-robin (`corral.net.addresses`), so each instance of
the run gets one nobody held before; the veths, the bridge's ports and the zygote's
launches churn all the same. Every
lifecycle creates, uses (exec, files, a background process), stops, starts, uses
again and deletes a sandbox or a computer; nothing may answer AGENT_UNAVAILABLE and
no computer may fail to provision.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import trio

from tests.http.computer_support import API, wait_for
from tests.support import Api, Tenant

SANDBOX_LIFECYCLES = 160
COMPUTER_LIFECYCLES = 40
WAVE = 6  # lifecycles in flight at once, per kind


class Failures:
    """Every unexpected answer, with what was being done."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.codes: collections.Counter[str] = collections.Counter()

    def check(self, what: str, response: Any, status: int) -> Any:
        if response.status_code != status:
            try:
                code = str(response.json()["error"]["code"])
            except (ValueError, KeyError, TypeError):
                code = f"HTTP {response.status_code}"
            self.codes[code] += 1
            self.items.append(f"{what}: {response.status_code} {response.text[:300]}")
            raise _LifecycleFailed
        return response.json() if response.content else None


class _LifecycleFailed(Exception):
    """Ends one lifecycle; what went wrong is already in `Failures`."""


async def sandbox_lifecycle(api: Api, tenant: Tenant, n: int, failures: Failures) -> None:
    key = tenant.key

    async def call(method: str, suffix: str, status: int = 200, **kwargs: Any) -> Any:
        response = await api.request(method, f"{API}/sandboxes{suffix}", key=key, **kwargs)
        return failures.check(f"sandbox #{n} {method} {suffix}", response, status)

    created = await call("POST", "", 201, json={"name": f"stress {n}"})
    sid = created["data"]["id"]
    ran = await call("POST", f"/{sid}/exec", json={"command": f"echo hi {n}"})
    assert ran["stdout"] == f"hi {n}\n", ran
    await call("POST", f"/{sid}/files/write", 201, json={"path": "/workspace/n.txt", "content": str(n)})
    process = await call("POST", f"/{sid}/processes", 201, json={"cmd": "sleep 300"})
    assert process["data"]["status"] == "running"
    await call("POST", f"/{sid}/stop")
    await call("POST", f"/{sid}/start")
    kept = await call("POST", f"/{sid}/exec", json={"command": "cat /workspace/n.txt"})
    assert kept["stdout"] == str(n), kept
    listed = await call("GET", f"/{sid}/files")
    assert "n.txt" in {f["name"] for f in listed["files"]}
    await call("DELETE", f"/{sid}")


async def computer_lifecycle(api: Api, tenant: Tenant, n: int, failures: Failures) -> None:
    key = tenant.key

    async def call(method: str, suffix: str, status: int = 200, **kwargs: Any) -> Any:
        response = await api.request(method, f"{API}/computers{suffix}", key=key, **kwargs)
        return failures.check(f"computer #{n} {method} {suffix}", response, status)

    created = await call("POST", "", 201, json={"name": f"stress {n}", "template_type": "svc-desktop"})
    cid = created["id"]
    computer = await wait_for(api, tenant, cid, "running", passing=("provisioning",))
    assert computer["status"] == "running"
    ran = await call("POST", f"/{cid}/exec", json={"command": f"echo hi {n}"})
    assert ran["output"] == f"hi {n}\n", ran
    await call("POST", f"/{cid}/files/write", 201, json={"path": "/workspace/n.txt", "content": str(n)})
    await call("POST", f"/{cid}/stop")
    await call("POST", f"/{cid}/start")
    kept = await call("POST", f"/{cid}/exec", json={"command": "cat /workspace/n.txt"})
    assert kept["output"] == str(n), kept
    await call("DELETE", f"/{cid}")


@pytest.mark.slow
async def test_overlapping_lifecycles_without_agent_failures(runtime_api: Api) -> None:
    failures = Failures()
    # Several tenants, so neither the per-tenant sandbox cap nor the per-key rate
    # limit is what is tested here.
    tenants = [await runtime_api.create_tenant(f"Stress {i}") for i in range(8)]
    limiter = trio.CapacityLimiter(WAVE)
    computer_limiter = trio.CapacityLimiter(max(2, WAVE // 2))
    addresses: set[str] = set()
    owners: set[str] = set()
    done = 0

    async def run(lifecycle: Any, n: int, gate: trio.CapacityLimiter) -> None:
        nonlocal done
        async with gate:
            try:
                await lifecycle(runtime_api, tenants[n % len(tenants)], n, failures)
            except _LifecycleFailed:
                return
            done += 1

    async def watch_addresses() -> None:
        driver: Any = await runtime_api.platform.runtime.driver()
        allocator = driver.network.addresses
        while True:
            assigned = allocator.assignments()
            owners.update(assigned)
            addresses.update(assigned.values())
            await trio.sleep(0.05)

    with trio.fail_after(900):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_addresses)
            async with trio.open_nursery() as work:
                for n in range(max(SANDBOX_LIFECYCLES, COMPUTER_LIFECYCLES)):
                    if n < SANDBOX_LIFECYCLES:
                        work.start_soon(run, sandbox_lifecycle, n, limiter)
                    if n < COMPUTER_LIFECYCLES:
                        work.start_soon(run, computer_lifecycle, n, computer_limiter)
            nursery.cancel_scope.cancel()

    assert failures.items == [], f"{failures.codes}: " + "\n".join(failures.items[:20])
    assert done == SANDBOX_LIFECYCLES + COMPUTER_LIFECYCLES
    # Addresses are handed out round-robin: fewer instances than the range holds, so
    # none came back while another was free (a reused one used to cost the next
    # instance's first connection a second: the SYN retransmit).
    assert len(owners) >= SANDBOX_LIFECYCLES + COMPUTER_LIFECYCLES
    assert len(addresses) == len(owners), (len(addresses), len(owners))
