"""Sandbox event and log streams (SSE): tickets, live events, Last-Event-ID replay, heartbeats."""

from __future__ import annotations

import trio

from corral.storage import utc_now_iso
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

from .test_sandboxes import create, run


def bearer(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.key}"}


async def ticket(api: Api, key: str) -> str:
    response = await api.request("POST", f"{API}/auth/sse-ticket", key=key)
    assert response.status_code == 200, response.text
    value: str = response.json()["ticket"]
    return value


async def test_exec_events_arrive_live_with_monotonic_ids(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    async with open_sse(runtime_api.client, f"{API}/sandboxes/{sid}/events", bearer(owner)) as stream:
        await stream.wait_connected()
        result = await run(runtime_api, owner, sid, "echo one; sleep 0.2; echo two >&2; exit 5")
        frames = await stream.frames_until("sandbox.exec.completed")
    assert [f.event for f in frames] == [
        "sandbox.exec.started", "sandbox.exec.stdout", "sandbox.exec.stderr", "sandbox.exec.completed",
    ]
    assert frames[0].data == {"exec_id": result["exec_id"], "command": "echo one; sleep 0.2; echo two >&2; exit 5"}
    assert frames[1].data == {"exec_id": result["exec_id"], "line": "one"}
    assert frames[2].data == {"exec_id": result["exec_id"], "line": "two"}
    assert frames[3].data["exit_code"] == 5 and isinstance(frames[3].data["duration_ms"], int)
    ids = [f.id for f in frames]
    assert all(ids) and ids == sorted(ids) and len(set(ids)) == 4 and all(len(i or "") == 26 for i in ids)


async def test_last_event_id_replays_exactly_the_missed_events(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    url = f"{API}/sandboxes/{sid}/events/stream"
    async with open_sse(runtime_api.client, url, bearer(owner)) as stream:
        await stream.wait_connected()
        await run(runtime_api, owner, sid, "echo first")
        seen = await stream.frames_until("sandbox.exec.completed")
    last_id = seen[-1].id
    assert last_id is not None
    # While nobody listens: two more execs.
    missed_a = await run(runtime_api, owner, sid, "echo second")
    missed_b = await run(runtime_api, owner, sid, "echo third")
    logged = [e for e in await runtime_api.platform.events.list("sandbox", sid, after=last_id)]
    assert len(logged) == 6
    async with open_sse(runtime_api.client, url, {**bearer(owner), "Last-Event-ID": last_id}) as stream:
        replayed = [await stream.next_frame() for _ in range(6)]
        # Then live again, with nothing repeated.
        live = await run(runtime_api, owner, sid, "echo fourth")
        after = await stream.frames_until("sandbox.exec.completed")
    assert [f.id for f in replayed] == [e.id for e in logged]
    assert [f.data.get("exec_id") for f in replayed] == [missed_a["exec_id"]] * 3 + [missed_b["exec_id"]] * 3
    assert [f.data.get("line") for f in replayed if f.event == "sandbox.exec.stdout"] == ["second", "third"]
    assert [f.data["exec_id"] for f in after] == [live["exec_id"]] * 3
    assert replayed[-1].id is not None and all((f.id or "") > replayed[-1].id for f in after)


async def test_a_browser_ticket_is_single_use(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    url = f"{API}/sandboxes/{sandbox['id']}/events"
    missing = await runtime_api.request("GET", url)
    error = assert_error(missing, 401, "UNAUTHORIZED")
    assert error["message"] == "missing sse ticket"
    value = await ticket(runtime_api, owner.key)
    async with open_sse(runtime_api.client, f"{url}?ticket={value}") as stream:
        await stream.wait_connected()
        await run(runtime_api, owner, sandbox["id"], "true")
        assert (await stream.next_frame()).event == "sandbox.exec.started"
    assert_error(await runtime_api.request("GET", f"{url}?ticket={value}"), 401, "UNAUTHORIZED")
    assert_error(await runtime_api.request("GET", f"{url}?ticket=sset_forged"), 401, "UNAUTHORIZED")
    expired = await ticket(runtime_api, owner.key)
    await runtime_api.platform.db.execute("UPDATE sse_tickets SET expires_at = ?", (utc_now_iso(),))
    await trio.sleep(0.01)
    assert_error(await runtime_api.request("GET", f"{url}?ticket={expired}"), 401, "UNAUTHORIZED")


async def test_a_ticket_carries_its_keys_scopes_and_tenant(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    url = f"{API}/sandboxes/{sandbox['id']}/events"
    narrow = await runtime_api.request("POST", f"{API}/api-keys", key=owner.key, json={"name": "n", "scopes": ["org:read"]})
    narrow_ticket = await ticket(runtime_api, narrow.json()["data"]["key"])
    assert_error(await runtime_api.request("GET", f"{url}?ticket={narrow_ticket}"), 403, "insufficient_scope")
    other = await runtime_api.create_tenant("Other")
    foreign = await ticket(runtime_api, other.key)
    assert_error(await runtime_api.request("GET", f"{url}?ticket={foreign}"), 404, "NOT_FOUND")
    revoked_key = await runtime_api.request("POST", f"{API}/api-keys", key=owner.key, json={"name": "r"})
    revoked_ticket = await ticket(runtime_api, revoked_key.json()["data"]["key"])
    gone = await runtime_api.request("DELETE", f"{API}/api-keys/{revoked_key.json()['data']['id']}", key=owner.key)
    assert gone.status_code in (200, 204)
    assert_error(await runtime_api.request("GET", f"{url}?ticket={revoked_ticket}"), 401, "UNAUTHORIZED")


async def test_idle_streams_get_heartbeats_and_a_client_that_leaves_is_noticed(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    bus = runtime_api.platform.bus
    before = bus.subscribers
    async with open_sse(runtime_api.client, f"{API}/sandboxes/{sandbox['id']}/events", bearer(owner)) as stream:
        await stream.wait_connected()
        assert bus.subscribers == before + 1
        await stream.wait_comment("heartbeat", timeout=5)  # every second in tests (15 s by default)
    with trio.fail_after(5):
        while bus.subscribers != before:
            await trio.sleep(0.05)


async def test_the_logs_stream_has_exec_and_process_output(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    async with open_sse(runtime_api.client, f"{API}/sandboxes/{sid}/logs/stream", bearer(owner)) as stream:
        await stream.wait_connected()
        await run(runtime_api, owner, sid, "echo from-exec")
        started = await runtime_api.request("POST", f"{API}/sandboxes/{sid}/processes", key=owner.key, json={"cmd": "echo from-process"})
        assert started.status_code == 201
        frames = [await stream.next_frame(), await stream.next_frame()]
    assert [(f.event, f.data["line"]) for f in frames] == [
        ("sandbox.exec.stdout", "from-exec"),
        ("sandbox.process.stdout", "from-process"),
    ]
    assert frames[1].data["pid"] == started.json()["data"]["pid"]


async def test_stream_errors(runtime_api: Api, owner: Tenant) -> None:
    for path in ("events", "events/stream", "logs/stream"):
        assert_error(await runtime_api.request("GET", f"{API}/sandboxes/nope/{path}", key=owner.key), 400, "INVALID_ID")
        missing = "00000000-0000-4000-8000-000000000000"
        assert_error(await runtime_api.request("GET", f"{API}/sandboxes/{missing}/{path}", key=owner.key), 404, "NOT_FOUND")
        assert_error(await runtime_api.request("GET", f"{API}/sandboxes/{missing}/{path}"), 401, "UNAUTHORIZED")
