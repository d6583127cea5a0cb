"""A computer's logs (contract §10): its desktop services' and app installs' output."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from corral.actors.computers import apps
from tests.http.computer_support import call, create, create_running, run, wait_for
from tests.sse_client import SseStream, open_sse
from tests.support import API, Api, Tenant, assert_error

Desk = tuple[Api, Tenant, dict[str, Any]]
VNC_HELLO = (
    "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/corral/vnc.sock'); "
    "s.recv(12); s.close()\"; sleep 0.2"
)
"""Connect to the desktop's VNC server and leave: the X server (Xvnc) logs both."""


@pytest.fixture
async def desk(runtime_api: Api, owner: Tenant) -> AsyncIterator[Desk]:
    computer = await create_running(runtime_api, owner)
    yield runtime_api, owner, computer


async def lines_of(api: Api, tenant: Tenant, cid: str, **params: Any) -> list[dict[str, Any]]:
    response = await call(api, tenant, "GET", cid, "/logs", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"data"} and set(body["data"]) == {"lines"}
    lines: list[dict[str, Any]] = body["data"]["lines"]
    assert all(set(line) == {"line", "ts", "source"} for line in lines)
    return lines


async def quiet_tail(api: Api, tenant: Tenant, cid: str, tail: int) -> list[dict[str, Any]]:
    """The last lines once the services have stopped writing for a moment (just after
    start they still do)."""
    before = await lines_of(api, tenant, cid, tail=10_000)
    with trio.fail_after(15):
        while True:
            await trio.sleep(0.5)
            now = await lines_of(api, tenant, cid, tail=10_000)
            if now == before:
                return now[-tail:]
            before = now


def stream_url(cid: str, **params: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{API}/computers/{cid}/logs/stream" + (f"?{query}" if query else "")


def bearer(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.key}"}


async def log_frames_until(stream: SseStream, text: str, timeout: float = 15) -> list[Any]:
    """`log` frames up to the first whose line contains `text`."""
    seen = []
    with trio.fail_after(timeout):
        while True:
            frame = await stream.next_frame()
            assert frame.event == "log" and set(frame.data) == {"line", "ts", "source"} and frame.id, frame
            seen.append(frame)
            if text in frame.data["line"]:
                return seen


async def test_the_logs_are_the_desktop_services_output(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    lines = await lines_of(api, tenant, cid)
    assert lines and {line["source"] for line in lines} <= {"xserver", "wm", "gateway", "apps"}
    assert any(line["source"] == "xserver" and "Xvnc" in line["line"] for line in lines), lines
    stamps = [line["ts"] for line in lines]
    assert stamps == sorted(stamps) and all(ts.endswith("Z") and "T" in ts for ts in stamps)
    await run(api, tenant, cid, VNC_HELLO)
    newest = await lines_of(api, tenant, cid, tail=3)
    assert len(newest) <= 3 and any("Connections" in line["line"] for line in newest), newest
    assert newest == (await lines_of(api, tenant, cid))[-len(newest):]
    assert await lines_of(api, tenant, cid, tail=0) == []
    for bad in ("-1", "abc", "10001"):
        assert_error(await call(api, tenant, "GET", cid, "/logs", params={"tail": bad}), 400, "INVALID_PARAM")


async def test_the_stream_sends_the_tail_then_live_lines_and_resumes_after_last_event_id(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    recent = await quiet_tail(api, tenant, cid, 2)
    tasks_before = len(api.platform.nursery.child_tasks)
    async with open_sse(api.client, stream_url(cid, tail=2), bearer(tenant)) as stream:
        await stream.wait_connected()
        first = [await stream.next_frame() for _ in range(len(recent))]
        assert len(api.platform.nursery.child_tasks) == tasks_before + 1  # its follower
        assert [f.data for f in first] == recent and all(f.event == "log" for f in first)
        await run(api, tenant, cid, VNC_HELLO)
        live = await log_frames_until(stream, "Connections")
        assert all(f.data["source"] == "xserver" for f in live)
        resume_from = live[-1].id
    # Lines written while nobody listens come after Last-Event-ID, and nothing before it.
    await run(api, tenant, cid, VNC_HELLO)
    async with open_sse(api.client, stream_url(cid), {**bearer(tenant), "Last-Event-ID": resume_from or ""}) as stream:
        missed = await log_frames_until(stream, "Connections")
        assert "Connections" in missed[-1].data["line"]
        assert all(f.data["ts"] >= live[-1].data["ts"] for f in missed)
    # A stream's followers (in the node's nursery) end with it.
    with trio.fail_after(5):
        while len(api.platform.nursery.child_tasks) > tasks_before:
            await trio.sleep(0.05)
    everything = await lines_of(api, tenant, cid, tail=10_000)
    position = next(i for i, line in reversed(list(enumerate(everything))) if line == live[-1].data)
    assert [f.data for f in missed] == everything[position + 1 : position + 1 + len(missed)]


async def test_the_stream_takes_a_general_ticket_and_closes_when_the_computer_stops(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)).json()["ticket"]
    async with open_sse(api.client, stream_url(cid, tail=0, ticket=ticket)) as stream:
        await stream.wait_connected()
        assert (await call(api, tenant, "POST", cid, "/stop")).status_code == 200
        with trio.fail_after(10), pytest.raises(EOFError):
            while True:  # the services' last words, if any, then the end
                assert (await stream.next_frame()).event == "log"
    assert_error(await api.request("GET", stream_url(cid, ticket=ticket)), 401, "UNAUTHORIZED")  # used
    missing = assert_error(await api.request("GET", stream_url(cid)), 401, "UNAUTHORIZED")
    assert missing["message"] == "missing sse ticket"


async def test_logs_need_a_running_computer(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    assert (await call(api, tenant, "POST", cid, "/pause")).status_code == 200
    assert_error(await call(api, tenant, "GET", cid, "/logs"), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(api, tenant, "GET", cid, "/logs/stream"), 409, "COMPUTER_NOT_RUNNING")
    assert (await call(api, tenant, "POST", cid, "/start")).status_code == 200
    assert (await call(api, tenant, "POST", cid, "/stop")).status_code == 200
    assert_error(await call(api, tenant, "GET", cid, "/logs"), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(api, tenant, "GET", cid, "/logs/stream"), 409, "COMPUTER_NOT_RUNNING")
    # After a start the services log afresh.
    assert (await call(api, tenant, "POST", cid, "/start")).status_code == 200
    assert any(line["source"] == "xserver" for line in await lines_of(api, tenant, cid))


async def test_every_route_is_404_for_another_tenant(desk: Desk) -> None:
    api, _, computer = desk
    other = await api.create_tenant("Other")
    for path in ("/logs", "/logs/stream"):
        assert_error(await call(api, other, "GET", computer["id"], path), 404, "COMPUTER_NOT_FOUND")
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=other.key)).json()["ticket"]
    assert_error(await api.request("GET", stream_url(computer["id"], ticket=ticket)), 404, "COMPUTER_NOT_FOUND")
    assert_error(await call(api, other, "GET", "not-a-uuid", "/logs"), 400, "INVALID_ID")


async def test_app_installs_are_logged_as_apps(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The install's output, whatever the install is (here a stand-in that needs no network)."""
    monkeypatch.setattr(apps, "install_command", lambda chosen: "echo installing " + " ".join(a.name for a in chosen) + "; echo done >&2")
    computer = await create(runtime_api, owner, selected_apps=["nano"])
    computer = await wait_for(runtime_api, owner, computer["id"], "running")
    assert "error" not in computer or not computer["error"], computer
    lines = [line for line in await lines_of(runtime_api, owner, computer["id"]) if line["source"] == "apps"]
    # stdout and stderr are read apart: their lines' order between them is the agent's arrival order.
    assert sorted(line["line"] for line in lines) == ["done", "installing nano"]


async def test_a_failed_install_says_why_and_its_output_stays_in_the_logs(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "install_command", lambda chosen: "echo E: Unable to locate package; exit 100")
    computer = await create(runtime_api, owner, selected_apps=["nano"])
    computer = await wait_for(runtime_api, owner, computer["id"], "running")
    assert computer["error"] == "installing nano failed (exit code 100): E: Unable to locate package"
    lines = [line["line"] for line in await lines_of(runtime_api, owner, computer["id"]) if line["source"] == "apps"]
    assert lines == ["E: Unable to locate package"]
