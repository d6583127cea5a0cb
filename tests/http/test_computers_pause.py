"""Pause (contract §10): the instance is frozen with every process intact, and start thaws it."""

from __future__ import annotations

import trio

from tests.http.computer_support import call, cgroup_value, create_running, events_until, run
from tests.support import Api, Tenant, assert_error

COUNTER = (
    "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done' "
    ">/dev/null 2>&1 & echo $!"
)


async def count(api: Api, tenant: Tenant, computer_id: str) -> int:
    return int((await run(api, tenant, computer_id, "cat /tmp/count"))["output"])


def freezer_state(api: Api, instance_id: str) -> str:
    path = f"/sys/fs/cgroup/freezer/{api.platform.settings.cgroup_parent}/{instance_id}/freezer.state"
    with open(path) as f:
        return f.read().strip()


async def meter_running(api: Api, computer_id: str) -> bool:
    value = await api.platform.db.fetch_value(
        "SELECT running FROM credit_meters WHERE resource_type = 'computer' AND resource_id = ?", (computer_id,)
    )
    return bool(value)


async def test_a_counter_survives_pause_and_start_with_the_same_pid(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid, vm = computer["id"], computer["vm_id"]
    pid = (await run(runtime_api, owner, cid, COUNTER))["output"].strip()
    await trio.sleep(0.3)
    assert await meter_running(runtime_api, cid)

    paused = await call(runtime_api, owner, "POST", cid, "/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused" and paused.json()["vm_id"] == vm
    events = await events_until(runtime_api, cid, "computer.stopped")
    assert events[-1].data == {"computer_id": cid, "reason": "paused"}
    assert freezer_state(runtime_api, vm) == "FROZEN"
    assert not await meter_running(runtime_api, cid)  # no compute credits while paused

    # Frozen: no CPU at all, and nothing moves.
    cpu_before = cgroup_value(runtime_api, "cpuacct", vm, "cpuacct.usage")
    await trio.sleep(1.0)
    assert cgroup_value(runtime_api, "cpuacct", vm, "cpuacct.usage") == cpu_before
    assert (await call(runtime_api, owner, "GET", cid)).json()["status"] == "paused"

    started = await call(runtime_api, owner, "POST", cid, "/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    assert freezer_state(runtime_api, vm) == "THAWED"
    assert await meter_running(runtime_api, cid)
    after_thaw = await count(runtime_api, owner, cid)
    # Same process, same count it had (a second of pause added nothing to it).
    assert (await run(runtime_api, owner, cid, f"kill -0 {pid} && echo alive"))["output"] == "alive\n"
    await trio.sleep(0.5)
    assert await count(runtime_api, owner, cid) > after_thaw  # and it goes on


async def test_the_count_does_not_advance_while_paused(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, COUNTER)
    await trio.sleep(0.3)
    before = await count(runtime_api, owner, cid)
    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    await trio.sleep(2.0)  # 40 ticks if it were running
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    assert await count(runtime_api, owner, cid) - before < 20


async def test_pause_refusals(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    again = await call(runtime_api, owner, "POST", cid, "/pause")
    assert assert_error(again, 409, "INVALID_STATE")["message"] == "computer must be running to pause"
    assert_error(await call(runtime_api, owner, "POST", cid, "/exec", json={"command": "true"}), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(runtime_api, owner, "POST", cid, "/stop"), 409, "INVALID_STATE")
    assert_error(await call(runtime_api, owner, "POST", cid, "/restart"), 409, "INVALID_STATE")
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    assert (await call(runtime_api, owner, "POST", cid, "/stop")).status_code == 200
    stopped = await call(runtime_api, owner, "POST", cid, "/pause")
    assert assert_error(stopped, 409, "INVALID_STATE")["message"] == "computer must be running to pause"


async def test_a_paused_computer_can_be_deleted(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid, vm = computer["id"], computer["vm_id"]
    await run(runtime_api, owner, cid, COUNTER)
    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    with trio.fail_after(15):
        deleted = await call(runtime_api, owner, "DELETE", cid)
    assert deleted.status_code == 200 and deleted.json() == {"id": cid, "deleted": True}
    assert_error(await call(runtime_api, owner, "GET", cid), 404, "COMPUTER_NOT_FOUND")
    driver = await runtime_api.platform.runtime.driver()
    assert vm not in {info.id for info in await driver.instances()}


async def test_pause_of_another_tenants_or_unknown_computer(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    other = await runtime_api.create_tenant("Other")
    assert_error(await call(runtime_api, other, "POST", computer["id"], "/pause"), 404, "COMPUTER_NOT_FOUND")
    unknown = "0b7c3f51-2f7e-4f44-9d3c-2f1d8e3b2a10"
    assert_error(await call(runtime_api, owner, "POST", unknown, "/pause"), 404, "COMPUTER_NOT_FOUND")
    assert_error(await call(runtime_api, owner, "POST", "not-an-id", "/pause"), 400, "INVALID_ID")
    assert (await call(runtime_api, owner, "GET", computer["id"])).json()["status"] == "running"
