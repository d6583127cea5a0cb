"""A real sandbox metered with a fast clock: spend rows, a falling balance, then a stop.

`meter_rate_scale` 2400 makes a second of running time count as 40 minutes, so a
small sandbox (3 credits an hour) spends 2 credits a second; rounds run every 0.2 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.support import API, PASSWORD, RUNTIME_SETTINGS, Api, assert_error, running_server


@pytest.fixture
async def fast_meter_api(runtime_host: None, tmp_path: Path) -> AsyncIterator[Api]:
    async with running_server(tmp_path / "corral", meter_interval=0.2, meter_rate_scale=2400, **RUNTIME_SETTINGS) as api:
        try:
            yield api
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def test_a_running_sandbox_spends_credits_until_it_is_stopped(fast_meter_api: Api) -> None:
    api = fast_meter_api
    response = await api.admin(
        "POST", f"{API}/admin/tenants", json={"name": "Metered", "owner_email": "meter@x.test", "owner_password": PASSWORD, "credits": 8}
    )
    assert response.status_code == 201, response.text
    created = response.json()["data"]
    tenant_id, key = created["tenant"]["id"], created["api_key"]["key"]

    async def balance() -> int:
        body = (await api.request("GET", f"{API}/credits/balance", key=key)).json()
        value: int = body["balance_credits"]
        return value

    with api.platform.bus.subscribe(tenant_id=tenant_id, types=["billing.*", "sandbox.stopped"], capacity=10_000) as events:
        response = await api.request("POST", f"{API}/sandboxes", key=key, json={"name": "metered"})
        assert response.status_code == 201, response.text
        sandbox_id = response.json()["data"]["id"]

        seen_balances = []
        with trio.fail_after(30):
            while True:
                sandbox = (await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=key)).json()["data"]
                seen_balances.append(await balance())
                if sandbox["status"] == "stopped":
                    break
                await trio.sleep(0.1)
        received = [await events.receive() for _ in range(events.pending)]

    # The balance fell step by step while it ran, and every step is a spend row of this sandbox.
    falling = [b for i, b in enumerate(seen_balances) if i == 0 or b != seen_balances[i - 1]]
    assert falling == sorted(falling, reverse=True) and len(falling) >= 3, seen_balances
    body = (await api.request("GET", f"{API}/credits/transactions", key=key, params={"page_size": 100})).json()
    spends = [t for t in body["transactions"] if t["type"] == "spend"]
    assert len(spends) >= 2
    assert {(t["resource_type"], t["resource_id"], t["provider"]) for t in spends} == {("sandbox", sandbox_id, None)}
    assert all(t["amount_credits"] < 0 for t in spends)
    final = await balance()
    assert final <= 0
    assert final == sum(t["amount_credits"] for t in body["transactions"])  # earn 8 and the spends

    types = [event.type for event in received]
    assert "billing.credit_low" in types and "billing.credit_exhausted" in types
    exhausted = next(e for e in received if e.type == "billing.credit_exhausted")
    assert exhausted.data["tenant_id"] == tenant_id and exhausted.data["balance_credits"] <= 0
    stopped = [e for e in received if e.type == "sandbox.stopped"]
    assert [e.data["reason"] for e in stopped] == ["credits_exhausted"]

    # Stopped means no more charging; starting again needs an hour's worth.
    await trio.sleep(0.6)
    assert await balance() == final
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/start", key=key)
    assert_error(response, 402, "INSUFFICIENT_CREDITS")
    granted = await api.admin("POST", f"{API}/admin/tenants/{tenant_id}/credits", json={"amount_credits": 50, "description": "top-up"})
    assert granted.status_code == 201, granted.text
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/start", key=key)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["status"] == "running"
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/stop", key=key)
    assert response.status_code == 200, response.text
