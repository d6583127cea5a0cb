"""Computer env (contract §8), metrics from the cgroups, auto-stop, and the event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from corral.storage import DecryptionError, associated_data
from tests.http.computer_support import API, call, create_running, quick_server, run, wait_for
from tests.sse_client import open_sse
from tests.support import Api, Tenant, assert_error


@pytest.fixture
async def api(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> AsyncIterator[Api]:
    async with quick_server(tmp_path_factory.mktemp("corral")) as server:
        yield server


@pytest.fixture
async def owner(api: Api) -> Tenant:
    return await api.create_tenant()


async def test_env_shapes_encryption_and_boot_injection(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    cid = computer["id"]
    assert (await call(api, owner, "GET", cid, "/env")).json() == {"env": []}
    first = await call(api, owner, "POST", cid, "/env", json={"name": "DB_PASSWORD", "value": "hunter2-secret"})
    assert first.status_code == 201 and set(first.json()) == {"name", "created_at", "updated_at"}
    await trio.sleep(0.01)
    again = await call(api, owner, "POST", cid, "/env", json={"name": "DB_PASSWORD", "value": "rotated-secret"})
    assert again.json()["created_at"] == first.json()["created_at"] and again.json()["updated_at"] > first.json()["updated_at"]
    await call(api, owner, "POST", cid, "/env", json={"name": "a_lower", "value": ""})
    listed = await call(api, owner, "GET", cid, "/env")
    assert [e["name"] for e in listed.json()["env"]] == ["DB_PASSWORD", "a_lower"]
    assert "secret" not in listed.text and "secret" not in again.text

    row = await api.platform.db.fetch_one("SELECT * FROM computer_env WHERE computer_id = ? AND name = 'DB_PASSWORD'", (cid,))
    assert row is not None and b"rotated-secret" not in bytes(row["value"])
    with pytest.raises(DecryptionError):  # bound to tenant, computer and name
        api.platform.secrets.decrypt_text(row["value"], associated_data(owner.id, cid, "computer-env:a_lower"))

    # At boot the instance's own environment has it (the agent's base env, not just exec's).
    await call(api, owner, "POST", cid, "/restart")
    driver = await api.platform.runtime.driver()
    agent = api.platform.agents.client(await driver.info(computer["vm_id"]))
    direct = await agent.exec('printf %s "$DB_PASSWORD"')
    assert direct.stdout == "rotated-secret"
    state = (driver.instance_dir(computer["vm_id"]) / "state.json").read_text()  # type: ignore[attr-defined]
    assert "rotated-secret" not in state

    assert (await call(api, owner, "DELETE", cid, "/env/a_lower")).json() == {"name": "a_lower", "deleted": True}
    assert_error(await call(api, owner, "DELETE", cid, "/env/a_lower"), 404, "NOT_FOUND")
    assert_error(await call(api, owner, "POST", cid, "/env", json={"value": "x"}), 400, "MISSING_PARAM")
    assert_error(await call(api, owner, "POST", cid, "/env", json={"name": "X"}), 400, "MISSING_PARAM")
    bad = await call(api, owner, "POST", cid, "/env", json={"name": "1-bad name", "value": 5})
    assert set(assert_error(bad, 422, "VALIDATION_ERROR")["details"]) == {"name", "value"}
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    logs = await api.platform.db.fetch_all("SELECT * FROM audit_events WHERE resource_id = ?", (cid,))
    assert logs and all("secret" not in str(dict(entry)) for entry in logs)


async def test_metrics_come_from_the_cgroups(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner, size="medium")
    cid = computer["id"]
    busy = await run(api, owner, cid, "timeout 2 sh -c 'while :; do :; done'; python3 -c 'b = bytearray(300 * 1024 * 1024); import time; time.sleep(1)'")
    assert busy["exit_code"] == 0
    metrics = (await call(api, owner, "GET", cid, "/metrics")).json()
    assert set(metrics) == {"cpu_percent", "memory_percent", "credits_per_hour"}
    assert metrics["credits_per_hour"] == 6
    cpu = [point["value"] for point in metrics["cpu_percent"]]
    memory = [point["value"] for point in metrics["memory_percent"]]
    assert len(cpu) >= 5 and len(memory) == len(cpu)
    assert max(cpu) >= 30  # one of two vCPUs busy is 50 %
    assert all(0 <= value <= 100 for value in cpu + memory)
    assert max(memory) >= 3  # 300 MB of 8 GB
    assert all(set(point) == {"ts", "value"} for point in metrics["cpu_percent"])
    timestamps = [point["ts"] for point in metrics["cpu_percent"]]
    assert timestamps == sorted(timestamps)
    for window in ("24h", "7d"):
        rolled = (await call(api, owner, "GET", cid, "/metrics", params={"window": window})).json()
        assert 1 <= len(rolled["cpu_percent"]) <= 2  # a few seconds of samples fall in one or two buckets
        assert rolled["credits_per_hour"] == 6
    assert_error(await call(api, owner, "GET", cid, "/metrics", params={"window": "1y"}), 400, "INVALID_PARAM")
    await call(api, owner, "POST", cid, "/stop")
    count = await api.platform.db.fetch_value("SELECT COUNT(*) AS n FROM computer_metrics WHERE computer_id = ?", (cid,))
    await trio.sleep(0.6)
    assert await api.platform.db.fetch_value("SELECT COUNT(*) AS n FROM computer_metrics WHERE computer_id = ?", (cid,)) == count
    assert len((await call(api, owner, "GET", cid, "/metrics")).json()["cpu_percent"]) == count  # a stopped computer keeps its history


async def test_auto_stop_setting_and_the_idle_stop(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    cid = computer["id"]
    assert (await call(api, owner, "GET", cid, "/auto-stop")).json() == {"auto_stop_seconds": 0, "enabled": False}
    assert_error(await call(api, owner, "PATCH", cid, "/auto-stop", json={}), 400, "MISSING_PARAM")
    for bad in (-1, "60", 1.5, True):
        assert_error(await call(api, owner, "PATCH", cid, "/auto-stop", json={"auto_stop_seconds": bad}), 422, "VALIDATION_ERROR")
    set_ = await call(api, owner, "PATCH", cid, "/auto-stop", json={"auto_stop_seconds": 1})
    assert set_.json() == {"auto_stop_seconds": 1, "enabled": True}
    assert (await call(api, owner, "GET", cid)).json()["auto_stop"] == 1
    # A command that runs longer than the limit is activity the whole time.
    assert (await run(api, owner, cid, "sleep 2.5; echo done"))["output"] == "done\n"
    assert (await call(api, owner, "GET", cid)).json()["status"] == "running"
    stopped = await wait_for(api, owner, cid, "stopped", timeout=15, passing=("running",))
    with trio.fail_after(5):  # the event follows the state change
        while (events := await api.platform.events.list("computer", cid))[-1].type != "computer.stopped":
            await trio.sleep(0.02)
    idle, last = events[-2], events[-1]
    assert idle.type == "computer.idle" and idle.data["computer_id"] == cid and idle.data["idle_seconds"] >= 1
    assert (last.type, last.data) == ("computer.stopped", {"computer_id": cid, "reason": "idle"})
    assert stopped["auto_stop"] == 1

    await call(api, owner, "POST", cid, "/start")
    disabled = await call(api, owner, "PATCH", cid, "/auto-stop", json={"auto_stop_seconds": None})
    assert disabled.json() == {"auto_stop_seconds": 0, "enabled": False}
    await trio.sleep(1.5)
    assert (await call(api, owner, "GET", cid)).json()["status"] == "running"


async def test_the_event_stream(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    cid = computer["id"]
    url = f"{API}/computers/{cid}/events"
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)).json()["ticket"]
    async with open_sse(api.client, f"{url}?ticket={ticket}") as stream:
        await stream.wait_connected()
        await call(api, owner, "POST", cid, "/restart")
        restarted = await stream.frames_until("computer.started")
        await call(api, owner, "PATCH", cid, "/auto-stop", json={"auto_stop_seconds": 1})
        idle = await stream.frames_until("computer.stopped")
    assert [(f.event, f.data) for f in restarted] == [
        ("computer.stopped", {"computer_id": cid, "reason": "restart"}),
        ("computer.running", {"computer_id": cid, "vm_id": computer["vm_id"]}),
        ("computer.started", {"computer_id": cid, "region": "local"}),
    ]
    assert [f.event for f in idle] == ["computer.idle", "computer.stopped"]
    assert idle[0].data["computer_id"] == cid and idle[0].data["idle_seconds"] >= 1
    assert idle[1].data == {"computer_id": cid, "reason": "idle"}
    resume = {"Authorization": f"Bearer {owner.key}", "Last-Event-ID": str(restarted[-1].id)}
    async with open_sse(api.client, url, resume) as stream:  # replays exactly what came after
        assert [(await stream.next_frame()).id for _ in range(2)] == [f.id for f in idle]
    assert_error(await api.request("GET", url), 401, "UNAUTHORIZED")
    other = await api.create_tenant("Other")
    assert_error(await api.request("GET", url, key=other.key), 404, "COMPUTER_NOT_FOUND")
