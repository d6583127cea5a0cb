"""Background processes of a sandbox, against real instances."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

from .test_sandboxes import create, run


async def start(api: Api, tenant: Tenant, sandbox_id: str, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/processes", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    process: dict[str, Any] = response.json()["data"]
    return process


async def get(api: Api, tenant: Tenant, sandbox_id: str, pid: str) -> dict[str, Any]:
    response = await api.request("GET", f"{API}/sandboxes/{sandbox_id}/processes/{pid}", key=tenant.key)
    assert response.status_code == 200, response.text
    process: dict[str, Any] = response.json()["data"]
    return process


async def wait_status(api: Api, tenant: Tenant, sandbox_id: str, pid: str, status: str) -> dict[str, Any]:
    with trio.fail_after(20):
        while True:
            process = await get(api, tenant, sandbox_id, pid)
            if process["status"] == status:
                return process
            await trio.sleep(0.1)


async def logs(api: Api, tenant: Tenant, sandbox_id: str, pid: str, **params: Any) -> list[str]:
    response = await api.request("GET", f"{API}/sandboxes/{sandbox_id}/processes/{pid}/logs", key=tenant.key, params=params)
    assert response.status_code == 200, response.text
    lines: list[str] = response.json()["data"]["lines"]
    return lines


async def test_a_web_server_runs_in_the_background_and_is_killed(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    await run(runtime_api, owner, sid, "mkdir -p /workspace/site && echo hello-page > /workspace/site/index.html")
    process = await start(
        runtime_api, owner, sid, cmd="exec python3 -u -m http.server 8000", cwd="/workspace/site", name="web"
    )
    assert set(process) == {"pid", "name", "cmd", "cwd", "status", "started_at", "exited_at", "exit_code"}
    assert process["pid"].startswith("proc_") and len(process["pid"]) == 31
    assert process["status"] == "running" and process["name"] == "web" and process["cwd"] == "/workspace/site"
    assert process["exit_code"] is None and process["exited_at"] is None
    pid = process["pid"]

    with trio.fail_after(15):  # the server answers from inside the sandbox
        while (await run(runtime_api, owner, sid, "curl -s localhost:8000/index.html"))["stdout"] != "hello-page\n":
            await trio.sleep(0.2)
    with trio.fail_after(10):  # and logged the request on stderr, which logs keep
        while not any("GET /index.html" in line for line in await logs(runtime_api, owner, sid, pid)):
            await trio.sleep(0.2)

    listed = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes", key=owner.key)
    assert [p["pid"] for p in listed.json()["data"]] == [pid]

    killed = await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}/processes/{pid}", key=owner.key)
    assert killed.status_code == 204, killed.text
    final = await get(runtime_api, owner, sid, pid)
    assert final["status"] == "killed" and final["exited_at"] is not None
    assert (await run(runtime_api, owner, sid, "curl -s -o /dev/null -w '%{http_code}' localhost:8000"))["stdout"] == "000"
    again = await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}/processes/{pid}", key=owner.key)
    assert again.status_code == 204  # deleting an ended process changes nothing
    assert (await get(runtime_api, owner, sid, pid))["status"] == "killed"


async def test_kill_escalates_to_sigkill_for_the_whole_group(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    # The shell ignores SIGTERM, and so does its child: only SIGKILL of the group ends them.
    process = await start(runtime_api, owner, sid, cmd="trap '' TERM; sh -c \"trap '' TERM; sleep 600\" & wait")
    pid = process["pid"]
    with trio.fail_after(10):
        while "sleep 600" not in (await run(runtime_api, owner, sid, "ps -eo args"))["stdout"]:
            await trio.sleep(0.1)
    started = trio.current_time()
    response = await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}/processes/{pid}", key=owner.key)
    assert response.status_code == 204
    assert trio.current_time() - started >= 4.5  # the grace period passed first
    assert (await get(runtime_api, owner, sid, pid))["status"] == "killed"
    assert "sleep 600" not in (await run(runtime_api, owner, sid, "ps -eo args"))["stdout"]


async def test_exit_code_logs_and_tail(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    process = await start(runtime_api, owner, sid, cmd="for i in $(seq 1 300); do echo line-$i; done; sleep 0.3; echo oops >&2; exit 3")
    final = await wait_status(runtime_api, owner, sid, process["pid"], "exited")
    assert final["exit_code"] == 3 and final["exited_at"] >= final["started_at"]
    default = await logs(runtime_api, owner, sid, process["pid"])
    assert len(default) == 200 and default[-1] == "oops" and default[0] == "line-102"
    assert await logs(runtime_api, owner, sid, process["pid"], tail=2) == ["line-300", "oops"]
    assert await logs(runtime_api, owner, sid, process["pid"], tail=0) == []
    bad = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes/{process['pid']}/logs?tail=x", key=owner.key)
    assert_error(bad, 400, "INVALID_PARAM")
    events = [e.type for e in await runtime_api.platform.events.list("sandbox", sid)]
    assert "sandbox.process.started" in events and "sandbox.process.exited" in events
    assert events.count("sandbox.process.stdout") == 300 and events.count("sandbox.process.stderr") == 1


async def test_cwd_env_and_sandbox_env(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner, env={"FROM_CREATE": "c"})
    sid = sandbox["id"]
    put = await runtime_api.request(
        "PUT", f"{API}/sandboxes/{sid}/env", key=owner.key, json={"vars": [{"key": "GREETING", "value": "hi there"}, {"key": "SHARED", "value": "sandbox"}]}
    )
    assert put.status_code == 200, put.text
    process = await start(
        runtime_api, owner, sid, cmd='echo "$GREETING|$SHARED|$FROM_CREATE|$ONLY|$(pwd)"', cwd="/tmp", env={"SHARED": "request", "ONLY": "x"}
    )
    await wait_status(runtime_api, owner, sid, process["pid"], "exited")
    assert await logs(runtime_api, owner, sid, process["pid"]) == ["hi there|request|c|x|/tmp"]


async def test_spawn_failure_is_recorded_as_error(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    response = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json={"cmd": "true", "cwd": "/nonexistent"})
    assert_error(response, 500, "PROCESS_START_FAILED")
    listed = (await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes", key=owner.key)).json()["data"]
    assert [p["status"] for p in listed] == ["error"]


async def test_errors(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    base = f"{API}/sandboxes/{sid}/processes"
    assert_error(await runtime_api.request("POST", base, key=owner.key, json={}), 400, "MISSING_PARAM")
    assert_error(await runtime_api.request("POST", base, key=owner.key, json={"cmd": "true", "cwd": "tmp"}), 422, "VALIDATION_ERROR")
    assert_error(await runtime_api.request("POST", base, key=owner.key, json={"cmd": "true", "env": {"A": 1}}), 422, "VALIDATION_ERROR")
    assert_error(await runtime_api.request("POST", base, key=owner.key, content=b"{"), 400, "INVALID_BODY")
    assert_error(await runtime_api.request("POST", f"{API}/sandboxes/nope/processes", key=owner.key, json={"cmd": "true"}), 400, "INVALID_ID")
    assert_error(await runtime_api.request("GET", f"{base}/proc_01aaaaaaaaaaaaaaaaaaaaaaaa", key=owner.key), 404, "NOT_FOUND")
    assert_error(await runtime_api.request("GET", f"{base}/whatever", key=owner.key), 404, "NOT_FOUND")
    assert_error(await runtime_api.request("DELETE", f"{base}/proc_01aaaaaaaaaaaaaaaaaaaaaaaa", key=owner.key), 404, "NOT_FOUND")
    stopped = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/stop", key=owner.key)
    assert stopped.status_code == 200
    assert_error(await runtime_api.request("POST", base, key=owner.key, json={"cmd": "true"}), 409, "SANDBOX_NOT_RUNNING")


async def test_stopping_the_sandbox_kills_its_processes_and_keeps_their_logs(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    process = await start(runtime_api, owner, sid, cmd="echo before-stop; sleep 600")
    with trio.fail_after(10):
        while await logs(runtime_api, owner, sid, process["pid"]) != ["before-stop"]:
            await trio.sleep(0.1)
    assert (await runtime_api.request("POST", f"{API}/sandboxes/{sid}/stop", key=owner.key)).status_code == 200
    final = await get(runtime_api, owner, sid, process["pid"])
    assert final["status"] == "killed"
    assert await logs(runtime_api, owner, sid, process["pid"]) == ["before-stop"]


async def test_the_stream_follows_lines_resumes_and_ends(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    process = await start(runtime_api, owner, sid, cmd="for i in 1 2 3; do echo n$i; sleep 0.3; done; exit 4")
    url = f"{API}/sandboxes/{sid}/processes/{process['pid']}/stream"
    headers = {"Authorization": f"Bearer {owner.key}"}
    async with open_sse(runtime_api.client, url, headers) as stream:
        frames = await stream.frames_until("exit")
        with pytest.raises(EOFError):  # the server ends the stream after `exit`
            await stream.next_frame()
    assert [f.event for f in frames] == ["log", "log", "log", "exit"]
    assert [f.data["line"] for f in frames[:3]] == ["n1", "n2", "n3"]
    assert all(f.data["ts"].endswith("Z") and f.data["stream"] == "stdout" for f in frames[:3])
    assert frames[3].data == {"pid": process["pid"], "status": "exited", "exit_code": 4}
    assert frames[0].id is not None
    async with open_sse(runtime_api.client, url, {**headers, "Last-Event-ID": frames[0].id}) as stream:
        resumed = await stream.frames_until("exit")
    assert [f.data.get("line") for f in resumed] == ["n2", "n3", None]
