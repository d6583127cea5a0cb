"""Agent runs on real computers, and the computer's agent event stream."""

from __future__ import annotations

import trio

from corral.ids import new_uuid
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

from .computer_support import call, create_running, run, wait_for
from .test_agent_runs import event_types, get_run, start_run


async def test_a_run_on_a_computer_streams_on_its_agent_events(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    put = await call(runtime_api, owner, "POST", cid, "/env", json={"name": "FROM_COMPUTER", "value": "c1"})
    assert put.status_code == 201, put.text
    url = f"{API}/computers/{cid}/agent/events"
    async with open_sse(runtime_api.client, url, owner.headers) as stream:
        await stream.wait_connected()
        made = await start_run(
            runtime_api, owner, computer_id=cid, prompt="hello", command='cat; echo " $FROM_COMPUTER $(pwd)"; echo e >&2; exit 2',
        )
        assert made["target_kind"] == "computer" and made["target_id"] == cid
        assert made["status"] == "failed" and made["exit_code"] == 2
        assert made["output"] == "hello c1 /workspace\n" and made["stderr"] == "e\n"
        assert made["metadata"]["agent_process"]["target_kind"] == "computer"
        frames = await stream.frames_until("command_finished", timeout=20)
        assert [f.event for f in frames] == ["created", "command_started", "process_started", "command_finished"]
        assert {f.data["run_id"] for f in frames} == {made["id"]}
        second = await start_run(runtime_api, owner, computer_id=cid, prompt="p", command="true")
        more = await stream.frames_until("command_finished", timeout=20)
        assert {f.data["run_id"] for f in more} == {second["id"]}
    # Resuming with Last-Event-ID replays the durable events after it.
    async with open_sse(runtime_api.client, url, {**owner.headers, "Last-Event-ID": str(frames[-1].id)}) as resumed:
        replayed = await resumed.frames_until("command_finished", timeout=10)
        assert [f.data["run_id"] for f in replayed] == [second["id"]] * 4

    other = await runtime_api.create_tenant("Other")
    assert_error(await runtime_api.request("GET", url, key=other.key), 404, "COMPUTER_NOT_FOUND")
    assert_error(await runtime_api.request("GET", f"{API}/computers/{new_uuid()}/agent/events", key=owner.key), 404, "COMPUTER_NOT_FOUND")
    assert_error(await runtime_api.request("GET", url), 401, "UNAUTHORIZED")
    assert_error(
        await runtime_api.request("POST", f"{API}/agent-runs", key=other.key, json={"computer_id": cid, "prompt": "p", "command": "true"}),
        404, "COMPUTER_NOT_FOUND",
    )


async def test_cancel_on_a_computer_stops_the_command(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    made = await start_run(runtime_api, owner, computer_id=cid, prompt="p", command="sleep 700", wait=False)
    with trio.fail_after(10):
        while "sleep 700" not in (await run(runtime_api, owner, cid, "ps -eo args"))["output"]:
            await trio.sleep(0.1)
    canceled = await runtime_api.request("POST", f"{API}/agent-runs/{made['id']}/cancel", key=owner.key)
    assert canceled.status_code == 200 and canceled.json()["data"]["status"] == "canceled"
    with trio.fail_after(15):
        while "sleep 700" in (await run(runtime_api, owner, cid, "ps -eo args"))["output"]:
            await trio.sleep(0.1)
    assert (await event_types(runtime_api, owner, made["id"]))[-1] == "canceled"
    assert (await get_run(runtime_api, owner, made["id"]))["status"] == "canceled"

    stopped = await call(runtime_api, owner, "POST", cid, "/stop")
    assert stopped.status_code == 200, stopped.text
    await wait_for(runtime_api, owner, cid, "stopped", passing=("running", "stopping"))
    refused = await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json={"computer_id": cid, "prompt": "p", "command": "true"})
    assert_error(refused, 409, "COMPUTER_NOT_RUNNING")
