"""Delivery end to end: real servers (SQLite and PostgreSQL), a real HTTPS receiver, restarts."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from corral.actors.webhooks import runtime_of, store
from corral.ids import new_uuid
from corral.storage import Event, iso_in
from tests.actors.webhooks.receiver import Receiver, verify_signatures
from tests.pg_server import create_database
from tests.support import ADMIN_KEY, API, Api, Tenant, free_port, running_server


@contextlib.asynccontextmanager
async def hooks_server(data_dir: Path, database_url: str, receiver: Receiver, **overrides: Any) -> AsyncIterator[Api]:
    """A server that may reach the loopback receiver and trusts its CA, with a fast schedule."""
    settings: dict[str, Any] = {
        "allow_private_destinations": True,
        "ca_bundle": str(receiver.ca_path),
        "webhook_retry_scale": 0.01,
        "webhook_poll_interval": 0.1,
        **overrides,
    }
    async with running_server(data_dir, database_url, **settings) as api:
        yield api


async def create_hook(api: Api, tenant: Tenant, url: str, **body: Any) -> tuple[str, str]:
    response = await api.request("POST", f"{API}/webhooks", key=tenant.key, json={"url": url, **body})
    assert response.status_code == 201, response.text
    hook = response.json()["data"]
    return hook["id"], hook["secret"]


async def publish(api: Api, tenant: Tenant, event_type: str = "sandbox.created") -> Event:
    sandbox_id = new_uuid()
    return await api.platform.bus.publish(Event(event_type, "sandbox", sandbox_id, {"sandbox_id": sandbox_id}, tenant_id=tenant.id))


async def attempts(api: Api, tenant: Tenant, hook_id: str) -> list[dict[str, Any]]:
    response = await api.request("GET", f"{API}/webhooks/{hook_id}/deliveries", key=tenant.key)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]
    return rows


async def wait_for_attempts(api: Api, tenant: Tenant, hook_id: str, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    with trio.fail_after(timeout):
        while len(rows := await attempts(api, tenant, hook_id)) < count:
            await trio.sleep(0.05)
    return rows



async def test_fails_twice_then_succeeds_shows_three_attempts(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    async with hooks_server(tmp_path / "data", database_url, receiver) as api:
        tenant = await api.create_tenant()
        hook_id, secret = await create_hook(api, tenant, receiver.url("/flaky"))
        receiver.script("/flaky", [500, 503])
        event = await publish(api, tenant)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
        rows = await wait_for_attempts(api, tenant, hook_id, 3)

    got = receiver.to("/flaky")
    assert [r.status for r in got] == [500, 503, 200]
    for received in got:
        verify_signatures(secret, received)
    assert {r.event_id for r in got} == {f"evt_{event.id}"}, "the event id changes across retries"
    assert len({r.headers["x-service-delivery"] for r in got}) == 3
    assert {r.body for r in got} == {got[0].body}, "retries must send the same bytes"
    assert got[0].json == {
        "id": f"evt_{event.id}", "type": "sandbox.created", "created_at": event.created_at,
        "tenant_id": tenant.id, "data": event.data,
    }
    assert all(r.headers["x-service-event"] == "sandbox.created" for r in got)
    assert all(r.headers["content-type"] == "application/json" for r in got)
    # The schedule, scaled by 0.01: attempt 2 after 30 s (+-10 %), attempt 3 after 5 min.
    assert 0.27 <= got[1].at - got[0].at < 3.0
    assert 2.7 <= got[2].at - got[1].at < 8.0

    assert [(r["attempt"], r["status"], r["status_code"]) for r in rows] == [(3, "delivered", 200), (2, "failed", 503), (1, "failed", 500)]
    assert rows[0]["next_attempt_at"] is None and rows[0]["delivered_at"] is not None and rows[0]["error"] is None
    assert all(r["next_attempt_at"] is not None and r["delivered_at"] is None for r in rows[1:])
    assert rows[2]["error"] == "HTTP 500"
    assert [r["id"] for r in rows] == [r.headers["x-service-delivery"] for r in reversed(got)]
    assert all(r["event_id"] == f"evt_{event.id}" and r["event_type"] == "sandbox.created" for r in rows)
    assert all(isinstance(r["duration_ms"], int) and r["duration_ms"] >= 0 for r in rows)


async def test_retry_count_zero_means_exactly_one_attempt(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    async with hooks_server(tmp_path / "data", database_url, receiver) as api:
        tenant = await api.create_tenant()
        hook_id, _ = await create_hook(api, tenant, receiver.url("/down"), retry_count=0)
        receiver.script("/down", [500] * 5)
        await publish(api, tenant)
        rows = await wait_for_attempts(api, tenant, hook_id, 1)
        await trio.sleep(1.5)  # a retry would come after 0.3 s
        rows = await attempts(api, tenant, hook_id)
        pending = await api.platform.db.fetch_value("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'")
    assert len(receiver.to("/down")) == 1
    assert [(r["attempt"], r["status"], r["status_code"], r["next_attempt_at"]) for r in rows] == [(1, "failed", 500, None)]
    assert pending == 0


async def test_restart_in_the_middle_of_a_retry_sequence_delivers_once(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    data_dir = tmp_path / "data"
    receiver.script("/hook", [500])
    async with hooks_server(data_dir, database_url, receiver, webhook_retry_scale=0.2) as api:
        tenant = await api.create_tenant()
        hook_id, secret = await create_hook(api, tenant, receiver.url())
        event = await publish(api, tenant)
        await wait_for_attempts(api, tenant, hook_id, 1)
        # attempt 2 is due about 6 s later: stop the control plane now
    assert [r.status for r in receiver.requests] == [500]

    async with hooks_server(data_dir, database_url, receiver, webhook_retry_scale=0.2) as api:
        await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
        rows = await wait_for_attempts(api, tenant, hook_id, 2)
        await trio.sleep(1.0)  # nothing else may arrive
        rows = await attempts(api, tenant, hook_id)
    assert [r.status for r in receiver.requests] == [500, 200]
    assert {r.event_id for r in receiver.requests} == {f"evt_{event.id}"}
    verify_signatures(secret, receiver.requests[1])
    assert [(r["attempt"], r["status"]) for r in rows] == [(2, "delivered"), (1, "failed")]


async def test_restart_mid_queue_loses_and_repeats_nothing(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    data_dir = tmp_path / "data"
    # The receiver answers nothing until the node is stopping, so every sending slot is
    # taken and the rest of the events wait in the queue when the close begins, however
    # fast or slow the machine (a fixed delay let a slow one finish the first attempts and
    # claim the queued ones before the close). The held attempts then end within the
    # shutdown grace; the queued ones are sent after the restart.
    gate = receiver.hold("/hook")
    count = 24  # more than one node sends at once (16), so some wait in the queue

    async def open_once_stopping(worker: Any) -> None:
        with trio.fail_after(30):
            while not worker.stopping:
                await trio.sleep(0.01)
        gate.set()

    async with trio.open_nursery() as watchers, hooks_server(data_dir, database_url, receiver) as api:
        tenant = await api.create_tenant()
        hook_id, _ = await create_hook(api, tenant, receiver.url())
        worker = runtime_of(api.platform).worker
        events: list[Event] = []

        async def publish_one() -> None:
            events.append(await publish(api, tenant))

        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(publish_one)
        await receiver.wait_for(lambda: receiver.arrivals["/hook"] == worker.concurrency)
        await trio.sleep(0.3)
        assert receiver.arrivals["/hook"] == worker.concurrency, "a node sends more at once than its slots"
        watchers.start_soon(open_once_stopping, worker)
        # close while attempts are in flight and others are queued
    assert len(receiver.requests) == worker.concurrency < count

    async with hooks_server(data_dir, database_url, receiver) as api:
        await receiver.wait_for(lambda: len(receiver.requests) >= count)
        await wait_for_attempts(api, tenant, hook_id, count)
        await trio.sleep(1.0)  # nothing more may arrive
        rows = await attempts(api, tenant, hook_id)
    ids = [r.event_id for r in receiver.requests]
    assert sorted(ids) == sorted(f"evt_{e.id}" for e in events), "an event was lost or sent twice"
    assert len(rows) == count and all(r["status"] == "delivered" and r["attempt"] == 1 for r in rows)


async def test_events_logged_but_not_queued_are_replayed_after_restart(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    data_dir = tmp_path / "data"
    async with hooks_server(data_dir, database_url, receiver) as api:
        tenant = await api.create_tenant()
        hook_id, _ = await create_hook(api, tenant, receiver.url())
        # As if the node died between writing the event log and queueing the delivery:
        sandbox_id = new_uuid()
        lost = await api.platform.events.append(
            Event("sandbox.ready", "sandbox", sandbox_id, {"sandbox_id": sandbox_id}, tenant_id=tenant.id)
        )
        await trio.sleep(0.5)
        assert receiver.requests == []
    async with hooks_server(data_dir, database_url, receiver) as api:
        await receiver.wait_for(lambda: len(receiver.requests) == 1)
        await wait_for_attempts(api, tenant, hook_id, 1)
        await trio.sleep(0.5)
        rows = await attempts(api, tenant, hook_id)
    assert [r.event_id for r in receiver.requests] == [f"evt_{lost.id}"]
    assert len(rows) == 1


async def test_events_are_filtered_by_type_tenant_and_creation_time(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    async with hooks_server(tmp_path / "data", database_url, receiver) as api:
        tenant, other = await api.create_tenant(), await api.create_tenant("Other")
        await publish(api, tenant, "sandbox.created")  # before any webhook exists
        ready_id, _ = await create_hook(api, tenant, receiver.url("/ready"), events=["sandbox.ready"])
        all_id, _ = await create_hook(api, tenant, receiver.url("/all"), events=[])
        await publish(api, tenant, "sandbox.created")
        await publish(api, tenant, "sandbox.started")  # not a webhook event type
        await publish(api, tenant, "sandbox.exec.stdout")
        await publish(api, other, "sandbox.ready")  # another tenant's
        await publish(api, tenant, "sandbox.ready")
        await publish(api, tenant, "billing.credit_low")
        await receiver.wait_for(lambda: len(receiver.requests) >= 4)
        await trio.sleep(0.5)
    assert [r.json["type"] for r in receiver.to("/ready")] == ["sandbox.ready"]
    assert sorted(r.json["type"] for r in receiver.to("/all")) == ["billing.credit_low", "sandbox.created", "sandbox.ready"]
    assert all(r.json["tenant_id"] == tenant.id for r in receiver.requests)
    assert ready_id != all_id


async def test_redirects_are_not_followed_and_slow_receivers_time_out(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    receiver.redirects["/moved"] = receiver.url("/target")
    receiver.delays["/slow"] = 3.0
    async with hooks_server(tmp_path / "data", database_url, receiver, webhook_timeout=0.5) as api:
        tenant = await api.create_tenant()
        moved_id, _ = await create_hook(api, tenant, receiver.url("/moved"), retry_count=0)
        slow_id, _ = await create_hook(api, tenant, receiver.url("/slow"), retry_count=0)
        await publish(api, tenant)
        moved = await wait_for_attempts(api, tenant, moved_id, 1)
        slow = await wait_for_attempts(api, tenant, slow_id, 1)
    assert (moved[0]["status"], moved[0]["status_code"]) == ("failed", 307)
    assert receiver.to("/target") == []
    assert (slow[0]["status"], slow[0]["status_code"]) == ("failed", None)
    assert "no complete response within 0.5 s" in slow[0]["error"]
    assert 450 <= slow[0]["duration_ms"] < 2000


async def test_an_expired_lease_is_claimed_again_and_a_live_one_is_not(tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    async with hooks_server(tmp_path / "data", database_url, receiver) as api:
        tenant = await api.create_tenant()
        hook_id, _ = await create_hook(api, tenant, receiver.url())
        rows = [
            store.new_attempt(
                webhook_id=hook_id, tenant_id=tenant.id, event_id=f"evt_{name}", event_type="sandbox.created",
                payload=json.dumps({"id": f"evt_{name}"}), attempt=1, scheduled_at=iso_in(-5),
            )
            for name in ("crashed", "busy")
        ]
        db = api.platform.db
        # Leased by nodes that claimed them: one died long ago, one is still sending.
        for row, until in zip(rows, (iso_in(-1), iso_in(60)), strict=True):
            await db.insert("webhook_deliveries", {**dataclasses.asdict(row), "lease_owner": "other-node", "lease_until": until})
        runtime_of(api.platform).worker.wake()
        await receiver.wait_for(lambda: len(receiver.requests) == 1)
        await trio.sleep(1.0)
    assert [r.event_id for r in receiver.requests] == ["evt_crashed"]


async def test_two_nodes_on_one_postgres_send_each_event_once(tmp_path: Path, postgres_url: str, receiver: Receiver) -> None:
    url = create_database(postgres_url, f"webhooks_two_nodes_{new_uuid()[:8]}")
    receiver.delays["/hook"] = 0.02
    data_dir = tmp_path / "data"
    fast = {"webhook_poll_interval": 0.02}
    async with hooks_server(data_dir, url, receiver, **fast) as node_a, hooks_server(data_dir, url, receiver, **fast) as node_b:
        tenant = await node_a.create_tenant()
        hook_id, _ = await create_hook(node_a, tenant, receiver.url())
        events = []
        for index in range(60):
            events.append(await publish(node_a if index % 2 else node_b, tenant))
        await receiver.wait_for(lambda: len(receiver.requests) >= 60, timeout=30)
        await wait_for_attempts(node_a, tenant, hook_id, 60)
        await trio.sleep(1.0)  # nothing more may arrive
        sent_a = runtime_of(node_a.platform).worker.attempts
        sent_b = runtime_of(node_b.platform).worker.attempts
        rows = await node_b.platform.db.fetch_all("SELECT status FROM webhook_deliveries WHERE webhook_id = ?", (hook_id,))
    assert sorted(r.event_id for r in receiver.requests) == sorted(f"evt_{e.id}" for e in events)
    assert sent_a + sent_b == 60 and sent_a > 0 and sent_b > 0
    assert [r["status"] for r in rows] == ["delivered"] * 60


async def test_an_unreadable_ca_bundle_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        async with running_server(tmp_path / "data", ca_bundle=str(tmp_path / "missing.pem")):
            pass
    assert raised.group_contains(ValueError, match="CORRAL_CA_BUNDLE")


async def test_a_restarted_corral_serve_process_sends_the_pending_retry(tmp_path: Path, receiver: Receiver) -> None:
    """The retry queued by one run is sent by a real `corral serve` started later, configured
    only through the contract's environment variables."""
    data_dir = tmp_path / "data"
    receiver.script("/hook", [500])
    async with hooks_server(data_dir, "", receiver, webhook_retry_scale=0.2) as api:
        tenant = await api.create_tenant()
        hook_id, secret = await create_hook(api, tenant, receiver.url())
        await publish(api, tenant)
        await wait_for_attempts(api, tenant, hook_id, 1)  # attempt 2 is due about 6 s later

    port = free_port()
    env = {
        **os.environ,
        "CORRAL_ADMIN_KEY": ADMIN_KEY,
        "CORRAL_ALLOW_PRIVATE_DESTINATIONS": "1",
        "CORRAL_CA_BUNDLE": str(receiver.ca_path),
        "CORRAL_WEBHOOK_RETRY_SCALE": "0.2",
    }
    command = [
        sys.executable, "-m", "corral", "serve", "--port", str(port), "--preview-port", str(free_port()), "--data-dir", str(data_dir)
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await receiver.wait_for(lambda: len(receiver.delivered()) == 1, timeout=30)
            with trio.fail_after(10):
                while len(rows := (await client.get(f"{API}/webhooks/{hook_id}/deliveries", headers=tenant.headers)).json()["data"]) < 2:
                    await trio.sleep(0.05)
        assert [(r["attempt"], r["status"]) for r in rows] == [(2, "delivered"), (1, "failed")]
        process.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(lambda: process.wait(timeout=15)) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert [r.status for r in receiver.requests] == [500, 200]
    verify_signatures(secret, receiver.requests[1])
