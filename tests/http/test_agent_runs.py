"""Agent runs (contract §14) in real sandboxes: create and wait, output, events, cancel, errors."""

from __future__ import annotations

from typing import Any

import trio

from corral.actors.agent_runs import profile_not_found
from corral.ids import new_uuid
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

from .test_sandboxes import create, run

RUN_FIELDS = {
    "id", "agent_run_group_id", "parent_agent_run_id", "orchestration_role", "target_kind", "target_id", "provider",
    "model", "prompt", "command", "cwd", "status", "exit_code", "output", "stderr", "metadata", "error",
    "agent_runtime_profile_id", "started_at", "finished_at", "created_at", "updated_at", "timeout",
    "output_truncated", "stderr_truncated",
}


async def start_run(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/agent-runs", key=tenant.key, json=body, timeout=120)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["data"]
    return result


async def get_run(api: Api, tenant: Tenant, run_id: str) -> dict[str, Any]:
    response = await api.request("GET", f"{API}/agent-runs/{run_id}", key=tenant.key)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["data"]
    return result


async def event_types(api: Api, tenant: Tenant, run_id: str) -> list[str]:
    response = await api.request("GET", f"{API}/agent-runs/{run_id}/events", key=tenant.key)
    assert response.status_code == 200, response.text
    return [event["type"] for event in response.json()["data"]]


async def wait_terminal(api: Api, tenant: Tenant, run_id: str, timeout: float = 30) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            current = await get_run(api, tenant, run_id)
            if current["status"] != "running":
                return current
            await trio.sleep(0.1)


async def test_custom_run_waits_for_its_result(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    result = await start_run(
        runtime_api, owner, sandbox_id=sid, prompt="say hi", model="gpt-test",
        command='cat; echo; echo "model=$AGENT_MODEL id=$AGENT_RUN_ID dir=$(pwd) x=$X"; echo warn >&2; exit 0',
        env={"X": "from-env"}, agent_run_group_id="g1", orchestration_role="coder", metadata={"team": "a"},
    )
    assert set(result) == RUN_FIELDS
    assert result["status"] == "succeeded" and result["exit_code"] == 0
    assert result["provider"] == "custom" and result["target_kind"] == "sandbox" and result["target_id"] == sid
    assert result["output"] == f"say hi\nmodel=gpt-test id={result['id']} dir=/workspace x=from-env\n"
    assert result["stderr"] == "warn\n"
    assert result["timeout"] == 600 and result["cwd"] == "/workspace"
    assert result["agent_run_group_id"] == "g1" and result["orchestration_role"] == "coder"
    process = result["metadata"]["agent_process"]
    assert result["metadata"]["team"] == "a"
    assert set(process) == {"target_kind", "target_id", "process_id", "pid", "started_at"}
    assert process["target_id"] == sid and process["process_id"].startswith("proc_")
    assert result["finished_at"] is not None
    assert await event_types(runtime_api, owner, result["id"]) == ["created", "command_started", "process_started", "command_finished"]
    # The run is a sandbox process, listed under /processes.
    listed = (await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes", key=owner.key)).json()["data"]
    assert [p["pid"] for p in listed] == [process["process_id"]]
    assert listed[0]["status"] in ("running", "exited")
    assert await get_run(runtime_api, owner, result["id"]) == result

    failed = await start_run(runtime_api, owner, target_id=sid, target_kind="sandbox", prompt="p", command="echo no >&2; exit 3", cwd="/tmp")
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and failed["stderr"] == "no\n" and failed["output"] == ""
    assert (await event_types(runtime_api, owner, failed["id"]))[-1] == "command_finished"
    inferred = await start_run(runtime_api, owner, target_id=sid, prompt="p", command="true")
    assert inferred["target_kind"] == "sandbox" and inferred["status"] == "succeeded"


async def test_wait_false_answers_running_and_the_stream_follows(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    result = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="sleep 1; echo done", wait=False)
    assert result["status"] == "running" and result["exit_code"] is None
    url = f"{API}/agent-runs/{result['id']}/events?stream=true"
    async with open_sse(runtime_api.client, url, owner.headers) as stream:
        frames = await stream.frames_until("command_finished", timeout=20)
        assert [f.event for f in frames] == ["created", "command_started", "process_started", "command_finished"]
        assert frames[-1].data["data"]["status"] == "succeeded" and frames[-1].data["run_id"] == result["id"]
        assert all(f.id == f.data["id"] for f in frames)
        assert sorted(f.id for f in frames) == [f.id for f in frames]
        try:
            await stream.next_frame(timeout=5)
            raise AssertionError("the stream should close after the terminal event")
        except EOFError:
            pass
    final = await get_run(runtime_api, owner, result["id"])
    assert final["status"] == "succeeded" and final["output"] == "done\n"
    # A finished run's stream sends what there is and closes.
    async with open_sse(runtime_api.client, url, owner.headers) as again:
        frames = await again.frames_until("command_finished", timeout=10)
        assert len(frames) == 4
    # Resuming after an id sends only what came after it.
    async with open_sse(runtime_api.client, url, {**owner.headers, "Last-Event-ID": str(frames[1].id)}) as resumed:
        rest = await resumed.frames_until("command_finished", timeout=10)
        assert [f.event for f in rest] == ["process_started", "command_finished"]


async def test_cancel_stops_the_process(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    result = await start_run(runtime_api, owner, sandbox_id=sid, prompt="p", command="echo started; sleep 600", wait=False)
    with trio.fail_after(10):
        while "sleep 600" not in (await run(runtime_api, owner, sid, "ps -eo args"))["stdout"]:
            await trio.sleep(0.1)
    canceled = await runtime_api.request("POST", f"{API}/agent-runs/{result['id']}/cancel", key=owner.key)
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["data"]["status"] == "canceled"
    with trio.fail_after(15):
        while "sleep 600" in (await run(runtime_api, owner, sid, "ps -eo args"))["stdout"]:
            await trio.sleep(0.1)
    assert (await event_types(runtime_api, owner, result["id"]))[-1] == "canceled"
    process_id = canceled.json()["data"]["metadata"]["agent_process"]["process_id"]
    with trio.fail_after(10):
        while True:
            process = (await runtime_api.request("GET", f"{API}/sandboxes/{sid}/processes/{process_id}", key=owner.key)).json()["data"]
            if process["status"] != "running":
                break
            await trio.sleep(0.1)
    assert process["status"] == "killed"
    # What it printed is in the canceled record at once, and stays once the process is gone.
    assert canceled.json()["data"]["output"] == "started\n"
    with trio.fail_after(10):
        while (final := await get_run(runtime_api, owner, result["id"]))["updated_at"] == canceled.json()["data"]["updated_at"]:
            await trio.sleep(0.1)
    assert final["status"] == "canceled" and final["output"] == "started\n"
    again = await runtime_api.request("POST", f"{API}/agent-runs/{result['id']}/cancel", key=owner.key)
    assert_error(again, 409, "INVALID_STATE")


async def test_timeout_bounds_and_expiry(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    base = {"sandbox_id": sid, "prompt": "p", "command": "true"}
    assert (await start_run(runtime_api, owner, **base))["timeout"] == 600
    assert (await start_run(runtime_api, owner, **base, timeout=3600))["timeout"] == 3600
    for bad in (3601, 0, -1, "x", 1.5):
        response = await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json={**base, "timeout": bad})
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert "timeout" in error["details"]
    started = trio.current_time()
    slow = await start_run(runtime_api, owner, sandbox_id=sid, prompt="p", command="echo before; sleep 30", timeout=1)
    assert trio.current_time() - started < 15
    assert slow["status"] == "failed" and slow["exit_code"] == 124 and "timeout" in slow["error"]
    assert (await event_types(runtime_api, owner, slow["id"]))[-1] == "failed"
    with trio.fail_after(15):  # what it printed before it was stopped is kept
        while (await get_run(runtime_api, owner, slow["id"]))["output"] != "before\n":
            await trio.sleep(0.1)
    assert (await get_run(runtime_api, owner, slow["id"]))["status"] == "failed"


async def test_output_caps_at_one_mebibyte(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    mib = 1024 * 1024
    exact = await start_run(
        runtime_api, owner, sandbox_id=sid, prompt="p",
        command=f"head -c {mib} /dev/zero | tr '\\0' a; head -c {mib} /dev/zero | tr '\\0' b >&2",
    )
    assert exact["status"] == "succeeded"
    assert exact["output"] == "a" * mib and exact["stderr"] == "b" * mib
    assert exact["output_truncated"] is False and exact["stderr_truncated"] is False
    over = await start_run(
        runtime_api, owner, sandbox_id=sid, prompt="p",
        command=f"head -c {mib + 1} /dev/zero | tr '\\0' a; head -c {3 * mib} /dev/zero | tr '\\0' b >&2; exit 4",
    )
    assert over["exit_code"] == 4  # the command was not cut short by the cap
    assert over["output"] == "a" * mib and over["stderr"] == "b" * mib
    assert over["output_truncated"] is True and over["stderr_truncated"] is True


async def test_providers_and_validation(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    missing_cli = await start_run(runtime_api, owner, sandbox_id=sid, prompt="p", provider="claude")
    assert missing_cli["status"] == "failed" and missing_cli["exit_code"] == 127
    assert missing_cli["provider"] == "claude" and missing_cli["command"].startswith("claude -p")
    assert await event_types(runtime_api, owner, missing_cli["id"]) == ["created", "failed"]
    # A provider CLI that is installed runs its built-in command line.
    await run(runtime_api, owner, sid, "printf '#!/bin/sh\\necho codex-args: \"$@\"\\n' > /usr/local/bin/codex && chmod +x /usr/local/bin/codex")
    codex = await start_run(runtime_api, owner, sandbox_id=sid, prompt="fix it", provider="codex", model="o3")
    assert codex["status"] == "succeeded" and codex["output"] == "codex-args: exec --model o3 fix it\n"

    nowhere = await start_run(runtime_api, owner, sandbox_id=sid, prompt="p", command="true", cwd="/nonexistent")
    assert nowhere["status"] == "failed" and nowhere["exit_code"] is None and "/nonexistent" in nowhere["error"]
    assert await event_types(runtime_api, owner, nowhere["id"]) == ["created", "failed"]

    post = lambda body: runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json=body)  # noqa: E731
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "provider": "custom"}), 422, "VALIDATION_ERROR")
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "provider": "nope", "command": "true"}), 422, "VALIDATION_ERROR")
    assert_error(await post({"sandbox_id": sid, "prompt": "p"}), 422, "VALIDATION_ERROR")
    assert assert_error(await post({"sandbox_id": sid, "command": "true"}), 400, "MISSING_PARAM")["message"] == "prompt is required"
    assert_error(await post({"sandbox_id": sid, "prompt": "", "command": "true"}), 400, "MISSING_PARAM")
    assert_error(await post({"prompt": "p", "command": "true"}), 400, "MISSING_PARAM")
    assert_error(await post({"target_id": "nope", "prompt": "p", "command": "true"}), 400, "INVALID_ID")
    assert_error(await post({"sandbox_id": new_uuid(), "prompt": "p", "command": "true"}), 404, "NOT_FOUND")
    assert_error(await post({"computer_id": new_uuid(), "prompt": "p", "command": "true"}), 404, "COMPUTER_NOT_FOUND")
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true", "cwd": "tmp"}), 422, "VALIDATION_ERROR")
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true", "env": {"A": 1}}), 422, "VALIDATION_ERROR")
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true", "metadata": {"artifact_paths": ["rel"]}}), 422, "VALIDATION_ERROR")
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true", "agent_runtime_profile_id": new_uuid()}), 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    assert_error(await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, content=b"{"), 400, "INVALID_BODY")
    paths = [f"/workspace/missing-{i}" for i in range(51)]
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true", "metadata": {"artifact_paths": paths}}), 422, "VALIDATION_ERROR")
    fifty = await start_run(runtime_api, owner, sandbox_id=sid, prompt="p", command="true", metadata={"artifact_paths": paths[:50]})
    artifacts = (await runtime_api.request("GET", f"{API}/agent-runs/{fifty['id']}/artifacts", key=owner.key)).json()["data"]
    assert len(artifacts) == 50 and {a["status"] for a in artifacts} == {"failed"}
    big = "x" * 100_001
    assert_error(await post({"sandbox_id": sid, "prompt": big, "command": "true"}), 422, "VALIDATION_ERROR")
    at_limit = await start_run(runtime_api, owner, sandbox_id=sid, prompt="y" * 100_000, command="wc -c")
    assert at_limit["status"] == "succeeded" and at_limit["output"].strip() == "100000"
    stopped = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/stop", key=owner.key)
    assert stopped.status_code == 200
    assert_error(await post({"sandbox_id": sid, "prompt": "p", "command": "true"}), 409, "SANDBOX_NOT_RUNNING")


async def test_list_filters_and_pages(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    ids = []
    for index in range(5):
        made = await start_run(runtime_api, owner, sandbox_id=sid, prompt=f"p{index}", command=f"exit {index % 2}", agent_run_group_id="g" if index < 3 else None)
        ids.append(made["id"])
    listed = await runtime_api.request("GET", f"{API}/agent-runs", key=owner.key)
    assert [r["id"] for r in listed.json()["data"]] == ids[::-1] and listed.json()["next_cursor"] is None
    first = (await runtime_api.request("GET", f"{API}/agent-runs?limit=2", key=owner.key)).json()
    assert [r["id"] for r in first["data"]] == ids[:2:-1][:2] and first["next_cursor"]
    second = (await runtime_api.request("GET", f"{API}/agent-runs?limit=2&cursor={first['next_cursor']}", key=owner.key)).json()
    third = (await runtime_api.request("GET", f"{API}/agent-runs?limit=2&cursor={second['next_cursor']}", key=owner.key)).json()
    assert [r["id"] for r in first["data"] + second["data"] + third["data"]] == ids[::-1] and third["next_cursor"] is None
    failed = (await runtime_api.request("GET", f"{API}/agent-runs?status=failed", key=owner.key)).json()["data"]
    assert {r["id"] for r in failed} == {ids[1], ids[3]}
    group = (await runtime_api.request("GET", f"{API}/agent-runs?agent_run_group_id=g&target_id={sid}", key=owner.key)).json()["data"]
    assert {r["id"] for r in group} == set(ids[:3])
    assert_error(await runtime_api.request("GET", f"{API}/agent-runs?limit=101", key=owner.key), 400, "INVALID_PARAM")
    assert_error(await runtime_api.request("GET", f"{API}/agent-runs?cursor=zzz", key=owner.key), 400, "INVALID_PARAM")
    assert (await runtime_api.request("GET", f"{API}/agent-runs?limit=100", key=owner.key)).status_code == 200


async def test_another_tenant_gets_404_everywhere(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    made = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="true")
    other = await runtime_api.create_tenant("Other")
    run_id = made["id"]
    for method, path in (
        ("GET", f"/agent-runs/{run_id}"),
        ("POST", f"/agent-runs/{run_id}/cancel"),
        ("GET", f"/agent-runs/{run_id}/events"),
        ("GET", f"/agent-runs/{run_id}/events?stream=true"),
        ("GET", f"/agent-runs/{run_id}/artifacts"),
        ("GET", f"/agent-runs/{run_id}/artifacts/{new_uuid()}/download"),
    ):
        assert_error(await runtime_api.request(method, f"{API}{path}", key=other.key), 404, "AGENT_RUN_NOT_FOUND")
    assert_error(await runtime_api.request("POST", f"{API}/agent-runs", key=other.key, json={"sandbox_id": sandbox["id"], "prompt": "p", "command": "true"}), 404, "NOT_FOUND")
    assert (await runtime_api.request("GET", f"{API}/agent-runs", key=other.key)).json()["data"] == []
    assert_error(await runtime_api.request("GET", f"{API}/agent-runs/{new_uuid()}", key=owner.key), 404, "AGENT_RUN_NOT_FOUND")
    assert_error(await runtime_api.request("GET", f"{API}/agent-runs/{run_id}"), 401, "invalid_token")


async def test_create_is_idempotent(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    body = {"sandbox_id": sandbox["id"], "prompt": "p", "command": "echo once >> /workspace/count"}
    headers = {"Idempotency-Key": "run-1"}
    first = await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json=body, headers=headers)
    second = await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json=body, headers=headers)
    assert first.status_code == second.status_code == 200
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert second.json() == first.json()
    assert (await run(runtime_api, owner, sandbox["id"], "cat /workspace/count"))["stdout"] == "once\n"


class _Profile:
    def __init__(self, provider: str | None, model: str | None, command: str | None, env: dict[str, str]) -> None:
        self.provider, self.model, self.command, self.env = provider, model, command, env
        self.id = "prof-1"


class _Profiles:
    """A stand-in for the profiles part behind its interface (`RunProfiles`): the real one
    is another part's; this tests how a run applies what it resolves."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None, str, str | None, bool]] = []

    async def resolve_for_run(
        self, tenant_id: str, workspace_id: str | None, kind: str, profile_id: str | None, skip: bool, *, target_id: str | None = None
    ) -> _Profile | None:
        self.asked.append((tenant_id, workspace_id, kind, profile_id, skip))
        if profile_id == "missing":
            raise profile_not_found()
        if skip:
            return None
        return _Profile("claude", "sonnet-x", 'echo "profile $AGENT_MODEL $SECRET_KEY $OVERRIDE"', {"SECRET_KEY": "s3cret", "OVERRIDE": "profile"})


async def test_a_profile_gives_provider_model_command_and_env(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    profiles = _Profiles()
    real = runtime_api.platform.run_profiles
    runtime_api.platform.run_profiles = profiles
    try:
        applied = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", env={"OVERRIDE": "request"})
        assert (applied["provider"], applied["model"], applied["status"]) == ("claude", "sonnet-x", "succeeded")
        assert applied["output"] == "profile sonnet-x s3cret request\n"
        assert "s3cret" not in str({k: v for k, v in applied.items() if k != "output"})  # the env is not in the record
        assert profiles.asked[-1] == (owner.id, owner.workspace_id, "sandbox", None, False)
        explicit = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", agent_profile_id="prof-1", command="echo mine")
        assert explicit["agent_runtime_profile_id"] == "prof-1" and explicit["output"] == "mine\n" and explicit["provider"] == "custom"
        skipped = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="echo ${SECRET_KEY:-none}", skip_agent_runtime_profile=True)
        assert skipped["output"] == "none\n" and profiles.asked[-1][-1] is True
        refused = await runtime_api.request("POST", f"{API}/agent-runs", key=owner.key, json={"sandbox_id": sandbox["id"], "prompt": "p", "command": "true", "agent_runtime_profile_id": "missing"})
        assert_error(refused, 404, "AGENT_RUNTIME_PROFILE_NOT_FOUND")
    finally:
        runtime_api.platform.run_profiles = real


async def test_a_real_profile_applies_to_a_run_and_binds_its_secrets(runtime_api: Api, owner: Tenant) -> None:
    """The node's own profiles part: a default profile for sandboxes gives the run its
    provider, model, command and sealed env; its secret reaches the run as a placeholder."""
    api = runtime_api
    secret = await api.request(
        "POST", f"{API}/egress/secrets", key=owner.key,
        json={"name": "model key", "value": "sk-real-value", "type": "api_key", "scope": "tenant", "allowed_hosts": ["api.example.com"]},
    )
    assert secret.status_code == 201, secret.text
    profile = await api.request(
        "POST", f"{API}/agent-runtime-profiles", key=owner.key,
        json={
            "name": "default-claude", "provider": "claude", "model": "sonnet-real", "applies_to": ["sandbox"],
            "command": 'echo "$AGENT_MODEL $GREETING ${MODEL_KEY:-unbound}"', "env": {"GREETING": "hello"},
            "secret_ids": [secret.json()["data"]["id"]], "is_default": True,
        },
    )
    assert profile.status_code == 201, profile.text
    sandbox = await create(api, owner)
    applied = await start_run(api, owner, sandbox_id=sandbox["id"], prompt="p")
    assert (applied["provider"], applied["model"], applied["status"]) == ("claude", "sonnet-real", "succeeded")
    assert applied["agent_runtime_profile_id"] == profile.json()["data"]["id"]
    model, greeting, key = applied["output"].split()
    assert (model, greeting) == ("sonnet-real", "hello")
    assert key.startswith("svc-tok-") and "sk-real-value" not in applied["output"]
    computer_only = await api.request(
        "POST", f"{API}/agent-runtime-profiles", key=owner.key,
        json={"name": "desk", "provider": "claude", "applies_to": ["computer"]},
    )
    refused = await api.request(
        "POST", f"{API}/agent-runs", key=owner.key,
        json={"sandbox_id": sandbox["id"], "prompt": "p", "agent_runtime_profile_id": computer_only.json()["data"]["id"]},
    )
    assert_error(refused, 422, "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE")


async def test_a_custom_run_needs_a_command_from_itself_or_its_profile(runtime_api: Api, owner: Tenant) -> None:
    """Contract §14: a `custom` profile may leave `command` out; the run is refused (422)
    only when neither it nor its profile gives one, and nothing is started then."""
    api = runtime_api
    profiles = f"{API}/agent-runtime-profiles"
    bare = await api.request(
        "POST", profiles, key=owner.key, json={"name": "bare-custom", "provider": "custom", "env": {"FROM_PROFILE": "yes"}}
    )
    assert bare.status_code == 201, bare.text
    assert bare.json()["data"]["command"] is None
    sandbox = await create(api, owner)
    refused = await api.request(
        "POST", f"{API}/agent-runs", key=owner.key, json={"sandbox_id": sandbox["id"], "prompt": "p", "agent_profile_id": "bare-custom"}
    )
    error = assert_error(refused, 422, "VALIDATION_ERROR")
    assert "command" in error["details"] and error["message"] == "command is required for provider custom"
    assert (await api.request("GET", f"{API}/agent-runs", key=owner.key)).json()["data"] == []
    # The run gives the command: it runs with the profile's env.
    given = await start_run(api, owner, sandbox_id=sandbox["id"], prompt="p", agent_profile_id="bare-custom", command='echo "env=$FROM_PROFILE"')
    assert (given["status"], given["provider"], given["output"]) == ("succeeded", "custom", "env=yes\n")
    assert given["agent_runtime_profile_id"] == bare.json()["data"]["id"]
    # `provider: custom` without a command of its own takes the profile's.
    with_command = await api.request(
        "POST", profiles, key=owner.key, json={"name": "custom-cmd", "provider": "custom", "command": "echo from-profile"}
    )
    assert with_command.status_code == 201, with_command.text
    taken = await start_run(api, owner, sandbox_id=sandbox["id"], prompt="p", provider="custom", agent_profile_id="custom-cmd")
    assert (taken["status"], taken["command"], taken["output"]) == ("succeeded", "echo from-profile", "from-profile\n")


async def test_the_event_stream_takes_a_ticket(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    made = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="true")
    url = f"{API}/agent-runs/{made['id']}/events?stream=true"
    ticket = (await runtime_api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)).json()["ticket"]
    async with open_sse(runtime_api.client, f"{url}&ticket={ticket}") as stream:
        frames = await stream.frames_until("command_finished")
        assert [f.event for f in frames] == ["created", "command_started", "process_started", "command_finished"]
    assert_error(await runtime_api.request("GET", url), 401, "UNAUTHORIZED")
    assert_error(await runtime_api.request("GET", f"{url}&ticket={ticket}"), 401, "UNAUTHORIZED")  # single use


async def test_a_run_whose_sandbox_stops_fails(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    made = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="sleep 600", wait=False)
    stopped = await runtime_api.request("POST", f"{API}/sandboxes/{sandbox['id']}/stop", key=owner.key)
    assert stopped.status_code == 200, stopped.text
    final = await wait_terminal(runtime_api, owner, made["id"], timeout=30)
    assert final["status"] == "failed" and final["error"], final
    assert (await event_types(runtime_api, owner, made["id"]))[-1] == "failed"
