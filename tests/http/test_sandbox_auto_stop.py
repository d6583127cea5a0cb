"""Auto-stop: an idle sandbox emits sandbox.idle, is suspended with its files kept, and resumes on start."""

from __future__ import annotations

from typing import Any

import trio

from tests.sse_client import open_sse
from tests.support import API, Api, Tenant

from .test_sandboxes import create, run


async def status(api: Api, tenant: Tenant, sandbox_id: str) -> str:
    response = await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)
    value: str = response.json()["data"]["status"]
    return value


async def test_an_idle_sandbox_is_suspended_and_resumes(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner, auto_stop=2)
    sid = sandbox["id"]
    await run(runtime_api, owner, sid, "echo kept > /workspace/note.txt")
    server = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json={"cmd": "sleep 600"})
    assert server.status_code == 201
    headers = {"Authorization": f"Bearer {owner.key}"}
    async with open_sse(runtime_api.client, f"{API}/sandboxes/{sid}/events", headers) as stream:
        await stream.wait_connected()
        idle = await stream.next_frame(timeout=10)
        suspended = await stream.frames_until("sandbox.suspended", timeout=10)
    assert idle.event == "sandbox.idle"
    assert idle.data["sandbox_id"] == sid and idle.data["last_activity_at"]
    assert suspended[-1].data == {"sandbox_id": sid}
    assert await status(runtime_api, owner, sid) == "suspended"
    process = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes/{server.json()['data']['pid']}", key=owner.key)
    assert process.json()["data"]["status"] == "killed"  # processes stop with the sandbox

    exec_while_suspended = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/exec", key=owner.key, json={"command": "true"})
    assert exec_while_suspended.status_code == 409
    started = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/start", key=owner.key)
    assert started.status_code == 200 and started.json()["data"]["status"] == "running"
    assert (await run(runtime_api, owner, sid, "cat /workspace/note.txt"))["stdout"] == "kept\n"


async def test_activity_keeps_a_sandbox_running(runtime_api: Api, owner: Tenant) -> None:
    busy = await create(runtime_api, owner, auto_stop=2)
    without = await create(runtime_api, owner)  # no auto_stop: never suspended
    with trio.move_on_after(4):
        while True:
            await run(runtime_api, owner, busy["id"], "true")
            await trio.sleep(0.5)
    assert await status(runtime_api, owner, busy["id"]) == "running"
    assert await status(runtime_api, owner, without["id"]) == "running"


async def test_process_output_counts_as_activity(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner, auto_stop=2)
    sid = sandbox["id"]
    body: dict[str, Any] = {"cmd": "while true; do echo tick; sleep 0.5; done"}
    assert (await runtime_api.request("POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json=body)).status_code == 201
    await trio.sleep(4)
    assert await status(runtime_api, owner, sid) == "running"
