"""Metering (contract §9) on a real platform, with a stand-in instance kind.

`widget` instances are meters without a runtime: tests move a meter's
`accrued_until` into the past to stand for running time, then run a metering round.
The background rounds of these servers wait for a wake-up (`meter_interval` inf), so
each test decides when charging happens.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.actors import billing
from corral.actors.billing import pricing, quotas
from corral.node import Platform
from corral.storage import Row, to_iso, utc_now
from tests.support import API, Api, running_server

STOPPED: list[str] = []


async def stop_widget(platform: Platform, widget_id: str) -> None:
    STOPPED.append(widget_id)
    await billing.meter_stop(platform, resource_type="widget", resource_id=widget_id)



@pytest.fixture
async def quiet_api(tmp_path: Path, database_url: str) -> AsyncIterator[Api]:
    """A server on SQLite, then on PostgreSQL, whose metering waits to be woken."""
    STOPPED.clear()
    async with running_server(tmp_path / "corral", database_url, meter_interval=math.inf) as api:
        platform = api.platform
        platform.billing_hooks.register_stopper("widget", lambda widget_id: stop_widget(platform, widget_id))
        yield api


async def tenant_with(api: Api, credits: int) -> str:
    response = await api.admin(
        "POST",
        f"{API}/admin/tenants",
        json={"name": "Metered", "owner_email": f"m{credits}-{utc_now().timestamp()}@x.test", "owner_password": "password123", "credits": credits},
    )
    assert response.status_code == 201, response.text
    tenant_id: str = response.json()["data"]["tenant"]["id"]
    return tenant_id


async def rewind(platform: Platform, widget_id: str, delta: timedelta) -> None:
    """Pretend the widget has run `delta` longer than charged so far."""
    meter = await meter_row(platform, widget_id)
    start = to_iso(utc_now() - delta)
    assert meter["running"]
    await platform.db.execute("UPDATE credit_meters SET accrued_until = ? WHERE resource_id = ?", (start, widget_id))


async def meter_row(platform: Platform, widget_id: str) -> Row:
    row = await platform.db.fetch_one("SELECT * FROM credit_meters WHERE resource_id = ?", (widget_id,))
    assert row is not None
    return row


async def spends(platform: Platform, tenant_id: str) -> list[int]:
    rows = await platform.db.fetch_all(
        "SELECT amount_credits FROM credit_transactions WHERE tenant_id = ? AND type = 'spend' ORDER BY seq", (tenant_id,)
    )
    return [int(r["amount_credits"]) for r in rows]


async def start_widget(platform: Platform, tenant_id: str, widget_id: str, size: str = "small", **extra: Any) -> None:
    await billing.meter_start(platform, tenant_id=tenant_id, resource_type="widget", resource_id=widget_id, size=size, **extra)


async def test_an_hour_costs_the_size_rate(quiet_api: Api) -> None:
    platform = quiet_api.platform
    for size, rate in (("small", 3), ("medium", 6), ("large", 12)):
        tenant_id = await tenant_with(quiet_api, 100)
        await start_widget(platform, tenant_id, f"w-{size}", size)
        await rewind(platform, f"w-{size}", timedelta(hours=1))
        await billing.charge_tenant(platform, tenant_id)
        assert await spends(platform, tenant_id) == [-rate]
        carry = int((await meter_row(platform, f"w-{size}"))["carry"])
        assert carry < pricing.MICROS_PER_HOUR // 100  # the few milliseconds since the rewind


async def test_the_remainder_is_carried_not_rounded(quiet_api: Api) -> None:
    platform = quiet_api.platform
    tenant_id = await tenant_with(quiet_api, 100)
    await start_widget(platform, tenant_id, "w1")
    await rewind(platform, "w1", timedelta(minutes=10))  # half a credit at 3 an hour
    await billing.charge_tenant(platform, tenant_id)
    assert await spends(platform, tenant_id) == []
    half = pricing.MICROS_PER_HOUR // 2
    assert half <= int((await meter_row(platform, "w1"))["carry"]) < half + pricing.MICROS_PER_HOUR // 100

    # Stopped and started again, the carried half credit is still there.
    await billing.meter_stop(platform, resource_type="widget", resource_id="w1")
    await start_widget(platform, tenant_id, "w1")
    await rewind(platform, "w1", timedelta(minutes=10))
    await billing.charge_tenant(platform, tenant_id)
    assert await spends(platform, tenant_id) == [-1]
    rows = await platform.db.fetch_all("SELECT * FROM credit_transactions WHERE type = 'spend' AND tenant_id = ?", (tenant_id,))
    assert (rows[0]["resource_type"], rows[0]["resource_id"], rows[0]["size"]) == ("widget", "w1", "small")
    assert rows[0]["cost_usd_micros"] == pricing.CREDIT_VALUE_USD_MICROS


async def test_charging_twice_in_a_row_charges_once(quiet_api: Api) -> None:
    platform = quiet_api.platform
    tenant_id = await tenant_with(quiet_api, 100)
    await start_widget(platform, tenant_id, "w1", "large")
    await rewind(platform, "w1", timedelta(minutes=30))
    for _ in range(3):
        await billing.charge_tenant(platform, tenant_id)
    await billing.meter_stop(platform, resource_type="widget", resource_id="w1")
    await billing.meter_stop(platform, resource_type="widget", resource_id="w1")
    assert await spends(platform, tenant_id) == [-6]


async def test_meter_state_survives_a_restart(tmp_path: Path) -> None:
    """The control plane stops; the instance runs on for 20 minutes; the next start
    charges exactly those 20 minutes, once."""
    async with running_server(tmp_path / "corral", meter_interval=math.inf) as api:
        tenant_id = await tenant_with(api, 100)
        await start_widget(api.platform, tenant_id, "w1")
        await rewind(api.platform, "w1", timedelta(minutes=10))
        await billing.charge_tenant(api.platform, tenant_id)
        assert await spends(api.platform, tenant_id) == []
    async with running_server(tmp_path / "corral", meter_interval=math.inf) as api:
        meter = await meter_row(api.platform, "w1")
        assert meter["running"] and int(meter["carry"]) >= pricing.MICROS_PER_HOUR // 2
        await rewind(api.platform, "w1", timedelta(minutes=10))
        metering = api.platform.metering
        await metering.round()
        await metering.round()
        assert await spends(api.platform, tenant_id) == [-1]


async def test_running_out_stops_instances_and_announces_it(quiet_api: Api) -> None:
    platform = quiet_api.platform
    tenant_id = await tenant_with(quiet_api, 12)
    other_id = await tenant_with(quiet_api, 100)
    with platform.bus.subscribe(types=["billing.*"]) as events:
        await start_widget(platform, tenant_id, "w1", "large")
        await start_widget(platform, tenant_id, "w2", "small")
        await start_widget(platform, other_id, "w3", "small")
        await rewind(platform, "w1", timedelta(hours=1))
        await rewind(platform, "w3", timedelta(hours=1))
        await platform.metering.round()
        assert sorted(STOPPED) == ["w1", "w2"]
        assert not (await meter_row(platform, "w1"))["running"]
        assert (await meter_row(platform, "w3"))["running"]
        seen = [await events.receive() for _ in range(events.pending)]
    types = [(e.type, e.tenant_id) for e in seen]
    assert ("billing.credit_low", tenant_id) in types
    assert ("billing.credit_exhausted", tenant_id) in types
    assert all(tenant == tenant_id for _, tenant in types)
    balance = await billing.get_balance(platform, tenant_id)
    assert balance["balance_credits"] <= 0
    rows = await platform.db.fetch_all("SELECT amount_credits FROM credit_transactions WHERE tenant_id = ?", (tenant_id,))
    assert balance["balance_credits"] == sum(int(r["amount_credits"]) for r in rows)


async def test_a_meter_started_with_nothing_left_wakes_metering_which_stops_it(quiet_api: Api) -> None:
    """Metering waits for a wake-up here (`meter_interval` inf): only the start of a
    meter on an empty balance (a create that raced with the last credit) wakes it."""
    platform = quiet_api.platform
    empty_id, funded_id = await tenant_with(quiet_api, 0), await tenant_with(quiet_api, 100)
    await start_widget(platform, funded_id, "funded-w")
    await trio.sleep(0.5)
    assert STOPPED == []  # a balance left: nothing woke metering
    await start_widget(platform, empty_id, "empty-w")
    with trio.fail_after(10):
        while STOPPED != ["empty-w"]:
            await trio.sleep(0.05)
    assert not (await meter_row(platform, "empty-w"))["running"]
    assert (await meter_row(platform, "funded-w"))["running"]


async def test_an_end_user_past_their_credit_quota_is_stopped(quiet_api: Api) -> None:
    platform = quiet_api.platform
    tenant_id = await tenant_with(quiet_api, 100)
    await quotas.put_quota(platform.db, tenant_id, "alice", {"max_credit_cents": 3})
    await start_widget(platform, tenant_id, "alice-w", external_user_id="alice")
    await start_widget(platform, tenant_id, "bob-w", external_user_id="bob")
    await rewind(platform, "alice-w", timedelta(hours=1))
    await platform.metering.round()
    assert STOPPED == ["alice-w"]
    assert await quotas.credits_spent(platform.db, tenant_id, "alice") == 3
    with pytest.raises(Exception) as refused:
        await billing.require_run_allowance(
            platform, tenant_id=tenant_id, size="small", external_user_id="alice", resource_type="widget", resource_id="alice-w"
        )
    assert getattr(refused.value, "code", None) == "QUOTA_MAX_CREDITS_EXCEEDED"


async def test_ai_usage_is_priced_per_million_tokens_with_the_fraction_carried(quiet_api: Api) -> None:
    platform = quiet_api.platform
    tenant_id = await tenant_with(quiet_api, 100)
    amounts = []
    for _ in range(4):  # 50k standard input tokens: half a credit each
        row = await billing.record_ai_usage(
            platform, tenant_id=tenant_id, provider="anthropic", model="claude-haiku", input_tokens=50_000, output_tokens=0
        )
        amounts.append(row.amount_credits)
        assert row.type == "spend" and row.input_tokens == 50_000 and row.cost_usd_micros == 5_000
    assert amounts == [0, -1, 0, -1]
    row = await billing.record_ai_usage(
        platform, tenant_id=tenant_id, provider="anthropic", model="claude-opus-4", input_tokens=100_000, output_tokens=10_000
    )
    assert row.amount_credits == -7  # advanced: 6 for input, 1 for output
    row = await billing.record_ai_usage(
        platform, tenant_id=tenant_id, provider="openai", model="gpt-x", input_tokens=0, output_tokens=1_000_000,
        tier="advanced", cost_usd_micros=123,
    )
    assert (row.amount_credits, row.cost_usd_micros) == (-100, 123)
    balance = await billing.get_balance(platform, tenant_id)
    assert (balance["balance_credits"], balance["lifetime_spent"]) == (100 - 109, 109)


async def test_running_sandboxes_without_a_meter_get_one_at_start(tmp_path: Path) -> None:
    """A sandbox running since before billing existed is metered from the next start on."""
    async with running_server(tmp_path / "corral", meter_interval=math.inf) as api:
        tenant_id = await tenant_with(api, 100)
        workspace = await api.platform.db.fetch_one("SELECT id FROM workspaces WHERE tenant_id = ?", (tenant_id,))
        project = await api.platform.db.fetch_one("SELECT id FROM projects WHERE tenant_id = ?", (tenant_id,))
        assert workspace and project
        now = to_iso(utc_now())
        await api.platform.db.insert("sandboxes", {
            "id": "00000000-0000-4000-8000-00000000abcd", "tenant_id": tenant_id, "name": "old", "slug": "old-abcd",
            "template_id": "default", "size": "medium", "status": "running", "region": "local",
            "workspace_id": workspace["id"], "project_id": project["id"], "metadata": "{}", "created_at": now, "updated_at": now,
        })
    async with running_server(tmp_path / "corral", meter_interval=math.inf) as api:
        meter = await meter_row(api.platform, "00000000-0000-4000-8000-00000000abcd")
        assert (meter["resource_type"], meter["running"], meter["credits_per_hour"]) == ("sandbox", 1, 6)
