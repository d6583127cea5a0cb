"""The exec timeout through HTTP, at its default (30 s), its maximum (300 s) and past it.

A command that prints nothing for longer than the agent timeout (10 s) is normal
(builds, downloads, `sleep`); the agent timeout bounds only how long the agent takes
to start answering. The long waits run at once, so the file costs one maximum
timeout (about five minutes) of wall time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from tests.http.computer_support import create_running
from tests.sse_client import open_sse
from tests.support import Api, Tenant, assert_error

API = "/api/v1"


async def timed(api: Api, tenant: Tenant, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    response = await api.request("POST", f"{API}{path}", key=tenant.key, json=body, timeout=400)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result, time.monotonic() - started


@pytest.mark.slow
async def test_exec_timeouts_default_maximum_and_clamp(runtime_api: Api, owner: Tenant) -> None:
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    sid = created.json()["data"]["id"]
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    results: dict[str, tuple[dict[str, Any], float]] = {}

    async def run(name: str, path: str, body: dict[str, Any]) -> None:
        results[name] = await timed(runtime_api, owner, path, body)

    calls = {
        "sandbox silent 12 s": (f"/sandboxes/{sid}/exec", {"command": "sleep 12; echo slept", "timeout": 30}),
        "sandbox default": (f"/sandboxes/{sid}/exec", {"command": "echo start; sleep 45; echo never"}),
        "sandbox maximum": (f"/sandboxes/{sid}/exec", {"command": "sleep 1; echo ok", "timeout": 300}),
        "sandbox past maximum": (f"/sandboxes/{sid}/exec", {"command": "sleep 400; echo never", "timeout": 301}),
        "computer silent 12 s": (f"/computers/{cid}/exec", {"command": "sleep 12; echo slept", "timeout": 30}),
        "computer python 11 s": (f"/computers/{cid}/exec/python", {"code": "import time\ntime.sleep(11)\nprint(6 * 7)"}),
        "computer default": (f"/computers/{cid}/exec", {"command": "sleep 45; echo never"}),
        "computer past maximum": (f"/computers/{cid}/exec", {"command": "sleep 400; echo never", "timeout": 1000}),
    }
    with trio.fail_after(360):
        async with trio.open_nursery() as nursery:
            for name, (path, body) in calls.items():
                nursery.start_soon(run, name, path, body)

    result, took = results["sandbox silent 12 s"]
    assert (result["exit_code"], result["stdout"], result["timed_out"]) == (0, "slept\n", False)
    assert 12 <= took < 20 and result["duration_ms"] >= 12000
    result, took = results["sandbox default"]
    assert result["timed_out"] and result["exit_code"] == 143 and result["stdout"] == "start\n"
    assert 30 <= took < 40 and 30000 <= result["duration_ms"] < 33000
    result, took = results["sandbox maximum"]
    assert (result["exit_code"], result["stdout"], result["timed_out"]) == (0, "ok\n", False)
    result, took = results["sandbox past maximum"]
    assert result["timed_out"] and 300000 <= result["duration_ms"] < 303000, result  # clamped to 300 s

    result, took = results["computer silent 12 s"]
    assert result == {"output": "slept\n", "exit_code": 0} and 12 <= took < 20
    result, took = results["computer python 11 s"]
    assert result == {"output": "42\n", "exit_code": 0} and 11 <= took < 20
    result, took = results["computer default"]
    assert result == {"output": "", "exit_code": 143} and 30 <= took < 40
    result, took = results["computer past maximum"]
    assert result == {"output": "", "exit_code": 143} and 300 <= took < 310  # clamped to 300 s


@pytest.mark.slow
async def test_a_process_silent_for_longer_than_the_agent_timeout_streams_and_logs(runtime_api: Api, owner: Tenant) -> None:
    """A build that prints, says nothing for 15 s, then prints again: its SSE stream
    and its logs get every line, and the stream ends with the exit."""
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    sid = created.json()["data"]["id"]
    started = await runtime_api.request(
        "POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json={"cmd": "echo building; sleep 15; echo built"}
    )
    assert started.status_code == 201, started.text
    pid = started.json()["data"]["pid"]
    url = f"{API}/sandboxes/{sid}/processes/{pid}/stream"
    async with open_sse(runtime_api.client, url, {"Authorization": f"Bearer {owner.key}"}) as stream:
        frames = await stream.frames_until("exit", timeout=30)
    assert [f.data["line"] for f in frames if f.event == "log"] == ["building", "built"]
    assert frames[-1].data["exit_code"] == 0
    logs = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes/{pid}/logs", key=owner.key)
    assert logs.json()["data"]["lines"] == ["building", "built"]


@pytest.mark.parametrize("timeout", [0, -1, "30", True])
async def test_exec_timeout_must_be_a_positive_number(runtime_api: Api, owner: Tenant, timeout: Any) -> None:
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    sid = created.json()["data"]["id"]
    response = await runtime_api.request(
        "POST", f"{API}/sandboxes/{sid}/exec", key=owner.key, json={"command": "true", "timeout": timeout}
    )
    assert "timeout" in assert_error(response, 422, "VALIDATION_ERROR")["details"]


async def test_exec_output_is_kept_up_to_ten_megabytes_a_stream(runtime_api: Api, owner: Tenant) -> None:
    """Of stdout, and of stderr, an exec's answer carries at most 10 MiB; the command
    runs on to its end past it (here it prints 30 MiB more, then writes a file), and
    the answer says `output_truncated`. Exactly 10 MiB is not cut. A computer's exec
    answers the specification's `{output, exit_code}`, with `output_truncated: true`
    added only when output was cut."""
    limit = 10 * 1024 * 1024
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    sid = created.json()["data"]["id"]
    at_limit, _ = await timed(
        runtime_api, owner, f"/sandboxes/{sid}/exec", {"command": f"head -c {limit} /dev/zero | tr '\\0' o; head -c {limit} /dev/zero | tr '\\0' e >&2"}
    )
    assert (len(at_limit["stdout"]), len(at_limit["stderr"]), at_limit["output_truncated"]) == (limit, limit, False)
    assert set(at_limit["stdout"]) == {"o"} and set(at_limit["stderr"]) == {"e"}
    command = f"head -c {limit + 1} /dev/zero | tr '\\0' o; echo fine >&2; yes | head -c {3 * limit}; echo done > /tmp/after"
    past, _ = await timed(runtime_api, owner, f"/sandboxes/{sid}/exec", {"command": command})
    assert (len(past["stdout"]), past["stderr"], past["output_truncated"], past["exit_code"]) == (limit, "fine\n", True, 0)
    after, _ = await timed(runtime_api, owner, f"/sandboxes/{sid}/exec", {"command": "cat /tmp/after"})
    assert (after["stdout"], after["output_truncated"]) == ("done\n", False)

    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    small, _ = await timed(runtime_api, owner, f"/computers/{cid}/exec", {"command": "echo hi"})
    assert small == {"output": "hi\n", "exit_code": 0}
    cut, _ = await timed(runtime_api, owner, f"/computers/{cid}/exec", {"command": f"head -c {limit + 1} /dev/zero | tr '\\0' o >&2; exit 3"})
    assert (len(cut["output"]), cut["exit_code"], cut["output_truncated"]) == (limit, 3, True)


async def test_what_linux_cannot_run_is_refused_before_anything_runs(runtime_api: Api, owner: Tenant) -> None:
    """`/bin/sh -c` takes the command as one argument: at most 131,071 bytes (Linux's
    128 KiB for one argument, its NUL included), no NUL inside; variables need a name a
    shell can read and a value without NUL. What breaks these is 422 with the field
    named (before, the agent's connection broke: 502, or the start failed: 500)."""
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    sid = created.json()["data"]["id"]
    most = 128 * 1024 - 1
    at_most, _ = await timed(runtime_api, owner, f"/sandboxes/{sid}/exec", {"command": ": " + "x" * (most - 2)})
    assert at_most["exit_code"] == 0
    refused = [
        ("command", ": " + "x" * (most - 1), None, "must be at most 131071 bytes (a longer script goes in a file)"),
        ("command", "echo a\u0000b", None, "must not contain NUL characters"),
        ("env", "true", {"A=B": "x"}, "'A=B': a name is letters, digits and _, not starting with a digit"),
        ("env", "true", {"A": "x\u0000y"}, "A: a value must not contain NUL characters"),
    ]
    for field, command, env, problem in refused:
        response = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/exec", key=owner.key, json={"command": command, "env": env})
        assert assert_error(response, 422, "VALIDATION_ERROR")["details"] == {field: problem}
        process = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json={"cmd": command, "env": env})
        assert assert_error(process, 422, "VALIDATION_ERROR")["details"] == {field.replace("command", "cmd"): problem}
    lower, _ = await timed(runtime_api, owner, f"/sandboxes/{sid}/exec", {"command": "echo $http_proxy", "env": {"http_proxy": "http://p:3128"}})
    assert lower["stdout"] == "http://p:3128\n"
    computer = await create_running(runtime_api, owner)
    response = await runtime_api.request("POST", f"{API}/computers/{computer['id']}/exec", key=owner.key, json={"command": "echo a\u0000b"})
    assert assert_error(response, 422, "VALIDATION_ERROR")["details"] == {"command": "must not contain NUL characters"}
