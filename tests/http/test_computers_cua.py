"""CUA sessions (contract §10) on a real desktop: sessions, actions, end, tickets, the stream."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import trio
from PIL import Image

from corral.storage import parse_iso, utc_now
from tests.http.computer_support import call, create_running, run
from tests.http.test_computers_desktop import open_xterm, wait_for_window
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

S = "/cua/sessions"
SESSION_FIELDS = {"id", "computer_id", "status", "task", "metadata", "action_count", "created_at", "ended_at"}
Desk = tuple[Api, Tenant, dict[str, Any]]


@pytest.fixture
async def desk(runtime_api: Api, owner: Tenant) -> AsyncIterator[Desk]:
    """A running desktop computer at 800x600."""
    computer = await create_running(runtime_api, owner, resolution="800x600")
    yield runtime_api, owner, computer


async def new_session(api: Api, tenant: Tenant, cid: str, **body: Any) -> dict[str, Any]:
    response = await call(api, tenant, "POST", cid, S, json=body)
    assert response.status_code == 201, response.text
    session: dict[str, Any] = response.json()["data"]
    return session


async def act(api: Api, tenant: Tenant, cid: str, sid: str, action: str, **fields: Any) -> Any:
    return await call(api, tenant, "POST", cid, f"{S}/{sid}/actions", json={"action": action, **fields})


async def acted(api: Api, tenant: Tenant, cid: str, sid: str, action: str, **fields: Any) -> dict[str, Any]:
    """An action that must succeed: its `data`, checked for the contract's shape."""
    response = await act(api, tenant, cid, sid, action, **fields)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["data"]
    assert set(body) == {"action_id", "action", "ok", "duration_ms", "result"}
    assert body["action"] == action and body["ok"] is True, body
    assert body["action_id"].startswith("act_") and isinstance(body["duration_ms"], int) and body["duration_ms"] >= 0
    return body


async def session_of(api: Api, tenant: Tenant, cid: str, sid: str) -> dict[str, Any]:
    response = await call(api, tenant, "GET", cid, f"{S}/{sid}")
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()["data"]
    return session


async def sse_ticket(api: Api, tenant: Tenant, cid: str, sid: str) -> str:
    response = await call(api, tenant, "POST", cid, f"{S}/{sid}/sse-ticket")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"ticket", "expires_in", "session_id"} and body["expires_in"] == 3600 and body["session_id"] == sid
    assert body["ticket"].startswith("sset_")
    value: str = body["ticket"]
    return value


def events_url(cid: str, sid: str) -> str:
    return f"{API}/computers/{cid}{S}/{sid}/events"


def bearer(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.key}"}


# -- sessions ------------------------------------------------------------------------------


async def test_a_session_is_created_listed_read_and_ended(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    first = await new_session(api, tenant, cid, task="open the browser", metadata={"agent": "claude", "run": 7})
    assert set(first) == SESSION_FIELDS
    assert first["computer_id"] == cid and first["status"] == "active" and first["action_count"] == 0
    assert first["task"] == "open the browser" and first["metadata"] == {"agent": "claude", "run": 7}
    assert first["ended_at"] is None and parse_iso(first["created_at"]) > utc_now() - timedelta(seconds=30)
    bare = await new_session(api, tenant, cid)
    assert bare["task"] is None and bare["metadata"] == {}
    listed = await call(api, tenant, "GET", cid, S)
    assert listed.status_code == 200 and [s["id"] for s in listed.json()["data"]] == [bare["id"], first["id"]]
    assert await session_of(api, tenant, cid, first["id"]) == first

    ended = await call(api, tenant, "POST", cid, f"{S}/{first['id']}/end")
    assert ended.status_code == 200, ended.text
    body = ended.json()["data"]
    assert body["status"] == "ended" and body["ended_at"] is not None and body["id"] == first["id"]
    assert await session_of(api, tenant, cid, first["id"]) == body
    # Ending again changes nothing; acting on an ended session is refused.
    again = await call(api, tenant, "POST", cid, f"{S}/{first['id']}/end")
    assert again.status_code == 200 and again.json()["data"] == body
    assert_error(await act(api, tenant, cid, first["id"], "screenshot"), 409, "SESSION_ENDED")
    assert_error(await act(api, tenant, cid, first["id"], "wait", seconds=0), 409, "SESSION_ENDED")
    assert (await session_of(api, tenant, cid, first["id"]))["action_count"] == 0
    ended_events = [e for e in await api.platform.events.list("cua_session", first["id"]) if e.type == "cua.ended"]
    assert [e.data for e in ended_events] == [{"session_id": first["id"]}]  # once, however often it is ended


async def test_session_body_errors(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    assert "task" in assert_error(await call(api, tenant, "POST", cid, S, json={"task": 5}), 422, "VALIDATION_ERROR")["details"]
    assert "task" in assert_error(await call(api, tenant, "POST", cid, S, json={"task": "x" * 10_001}), 422, "VALIDATION_ERROR")["details"]
    assert "metadata" in assert_error(await call(api, tenant, "POST", cid, S, json={"metadata": [1]}), 422, "VALIDATION_ERROR")["details"]
    assert_error(await call(api, tenant, "POST", cid, S, content=b"{not json", headers={"Content-Type": "application/json"}), 400, "INVALID_BODY")
    assert (await call(api, tenant, "GET", cid, S)).json()["data"] == []


# -- actions ------------------------------------------------------------------------------


async def test_a_screenshot_action_is_a_png_of_the_resolution(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    shot = await acted(api, tenant, cid, sid, "screenshot")
    result = shot["result"]
    assert set(result) == {"image_base64", "width", "height"} and (result["width"], result["height"]) == (800, 600)
    image = Image.open(io.BytesIO(base64.b64decode(result["image_base64"])))
    assert image.format == "PNG" and image.size == (800, 600)
    region = await acted(api, tenant, cid, sid, "screenshot", x=10, y=20, width=30, height=40)
    assert (region["result"]["width"], region["result"]["height"]) == (30, 40)
    assert Image.open(io.BytesIO(base64.b64decode(region["result"]["image_base64"]))).size == (30, 40)
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 2
    logged = await api.platform.events.list("cua_session", sid)
    assert [e.type for e in logged] == ["cua.action", "cua.screenshot", "cua.action", "cua.screenshot"]
    assert logged[0].data == {"action_id": shot["action_id"], "action": "screenshot", "ok": True, "duration_ms": shot["duration_ms"],
                              "params": {"x": None, "y": None, "width": None, "height": None}}
    assert logged[1].data == {"action_id": shot["action_id"], "width": 800, "height": 600}
    assert logged[3].data == {"action_id": region["action_id"], "width": 30, "height": 40}
    assert all(e.tenant_id == tenant.id and e.resource_id == sid for e in logged)


async def test_mouse_actions_reach_the_desktop(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    await run(api, tenant, cid, "nohup xev -geometry 200x200+0+0 -event button > /tmp/xev.log 2>/tmp/window.log &")
    target = await wait_for_window(api, tenant, cid, "Event Tester")
    x, y = target["x"] + 50, target["y"] + 50
    assert (await acted(api, tenant, cid, sid, "click", x=x, y=y, button="right"))["result"] == {"x": x, "y": y, "button": "right"}
    assert (await acted(api, tenant, cid, sid, "double_click", x=x, y=y))["result"] == {"x": x, "y": y, "button": "left"}
    assert (await acted(api, tenant, cid, sid, "scroll", x=x, y=y, direction="down", amount=2))["result"] == {"direction": "down", "amount": 2}
    await trio.sleep(0.3)
    log = (await run(api, tenant, cid, "grep -o 'button [0-9]' /tmp/xev.log | tr '\\n' ' '"))["output"]
    assert log.split("button ")[1:] == ["3 ", "3 ", "1 ", "1 ", "1 ", "1 ", "5 ", "5 ", "5 ", "5 "]
    assert (await acted(api, tenant, cid, sid, "move", x=123, y=456))["result"] == {"x": 123, "y": 456}
    assert (await call(api, tenant, "GET", cid, "/desktop/cursor")).json() == {"x": 123, "y": 456}
    assert (await acted(api, tenant, cid, sid, "drag", from_x=300, from_y=300, to_x=310, to_y=320))["result"] == {"x": 310, "y": 320}
    assert (await call(api, tenant, "GET", cid, "/desktop/cursor")).json() == {"x": 310, "y": 320}
    logged = [e for e in await api.platform.events.list("cua_session", sid) if e.type == "cua.action"]
    assert [e.data["action"] for e in logged] == ["click", "double_click", "scroll", "move", "drag"]
    assert logged[0].data["params"] == {"x": x, "y": y, "button": "right", "double": False}
    assert logged[1].data["params"] == {"x": x, "y": y, "button": "left", "double": True}
    assert logged[4].data["params"] == {"from_x": 300, "from_y": 300, "to_x": 310, "to_y": 320, "button": "left"}
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 5


async def test_typed_text_and_keys_land_in_the_focused_xterm(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid, task="type"))["id"]
    await open_xterm(api, tenant, cid, "cua-typing", "cat > /tmp/typed.txt")
    text = "Hello, wörld! $HOME 'quotes' ; & |"
    assert (await acted(api, tenant, cid, sid, "type", text=text))["result"] == {"characters": len(text)}
    assert (await acted(api, tenant, cid, sid, "key", keys="Return"))["result"] == {"keys": "Return"}
    assert (await acted(api, tenant, cid, sid, "key", keys="ctrl+d"))["result"] == {"keys": "ctrl+d"}
    with trio.fail_after(10):
        while (await run(api, tenant, cid, "pgrep -f 'cat$' >/dev/null || echo gone"))["output"] != "gone\n":
            await trio.sleep(0.05)
    assert (await run(api, tenant, cid, "cat /tmp/typed.txt"))["output"] == text + "\n"
    typed = next(e for e in await api.platform.events.list("cua_session", sid) if e.data.get("action") == "type")
    assert typed.data["params"] == {"text": text, "delay_ms": 12}


async def test_wait_up_to_30_seconds(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    short = await acted(api, tenant, cid, sid, "wait", seconds=0.2)
    assert short["result"] == {"seconds": 0.2} and short["duration_ms"] >= 200
    assert "seconds" in assert_error(await act(api, tenant, cid, sid, "wait", seconds=31), 422, "VALIDATION_ERROR")["details"]
    assert "seconds" in assert_error(await act(api, tenant, cid, sid, "wait", seconds=30.5), 422, "VALIDATION_ERROR")["details"]
    assert "seconds" in assert_error(await act(api, tenant, cid, sid, "wait", seconds=-1), 422, "VALIDATION_ERROR")["details"]
    assert "seconds" in assert_error(await act(api, tenant, cid, sid, "wait", seconds="5"), 422, "VALIDATION_ERROR")["details"]
    assert_error(await act(api, tenant, cid, sid, "wait"), 400, "MISSING_PARAM")
    # The longest wait does not hold up the session: it can be read (and is not ended) meanwhile.
    async with trio.open_nursery() as nursery:
        longest: dict[str, Any] = {}

        async def wait_30() -> None:
            response = await call(api, tenant, "POST", cid, f"{S}/{sid}/actions", json={"action": "wait", "seconds": 30}, timeout=60)
            assert response.status_code == 200, response.text
            longest.update(response.json()["data"])

        nursery.start_soon(wait_30)
        await trio.sleep(1)
        assert (await session_of(api, tenant, cid, sid))["action_count"] == 1
    assert longest["result"] == {"seconds": 30} and longest["duration_ms"] >= 30_000
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 2


async def test_action_errors_are_the_desktop_routes_and_are_not_recorded(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    assert_error(await call(api, tenant, "POST", cid, f"{S}/{sid}/actions", json={}), 400, "MISSING_PARAM")
    assert "action" in assert_error(await act(api, tenant, cid, sid, "teleport"), 422, "VALIDATION_ERROR")["details"]
    assert_error(await act(api, tenant, cid, sid, "click", x=1), 400, "MISSING_PARAM")
    assert "x" in assert_error(await act(api, tenant, cid, sid, "click", x=800, y=0), 422, "VALIDATION_ERROR")["details"]
    assert "button" in assert_error(await act(api, tenant, cid, sid, "double_click", x=1, y=1, button="side"), 422, "VALIDATION_ERROR")["details"]
    assert "to_y" in assert_error(await act(api, tenant, cid, sid, "drag", from_x=1, from_y=1, to_x=1, to_y=600), 422, "VALIDATION_ERROR")["details"]
    assert "amount" in assert_error(await act(api, tenant, cid, sid, "scroll", direction="up", amount=101), 422, "VALIDATION_ERROR")["details"]
    assert "keys" in assert_error(await act(api, tenant, cid, sid, "key", keys="NoSuchKeyName"), 422, "VALIDATION_ERROR")["details"]
    assert_error(await act(api, tenant, cid, sid, "type"), 400, "MISSING_PARAM")
    assert "text" in assert_error(await act(api, tenant, cid, sid, "type", text="x" * 10_001), 422, "VALIDATION_ERROR")["details"]
    assert set(assert_error(await act(api, tenant, cid, sid, "screenshot", x=0, y=0), 422, "VALIDATION_ERROR")["details"]) == {"width", "height"}
    assert "width" in assert_error(await act(api, tenant, cid, sid, "screenshot", x=0, y=0, width=801, height=1), 422, "VALIDATION_ERROR")["details"]
    assert_error(await call(api, tenant, "POST", cid, f"{S}/{sid}/actions", content=b"[", headers={"Content-Type": "application/json"}), 400, "INVALID_BODY")
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 0
    assert await api.platform.events.list("cua_session", sid) == []


async def test_an_action_the_desktop_cannot_do_is_recorded_as_not_ok(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    await run(api, tenant, cid, "pkill -x openbox; pkill -x Xvnc; sleep 0.3")  # the X server is gone
    response = await act(api, tenant, cid, sid, "click", x=10, y=10)
    assert response.status_code == 200, response.text
    body = response.json()["data"]
    assert body["ok"] is False and body["action"] == "click"
    assert body["result"]["error"]["code"] == "DESKTOP_ERROR" and body["result"]["error"]["message"]
    logged = await api.platform.events.list("cua_session", sid)
    assert [(e.type, e.data["ok"]) for e in logged] == [("cua.action", False)]
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 1


async def test_actions_need_a_running_computer(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    assert (await call(api, tenant, "POST", cid, "/stop")).status_code == 200
    for action, fields in (("screenshot", {}), ("click", {"x": 1, "y": 1}), ("type", {"text": "a"}), ("wait", {"seconds": 0})):
        assert_error(await act(api, tenant, cid, sid, action, **fields), 409, "COMPUTER_NOT_RUNNING")
    # Sessions themselves do not need it.
    stopped_session = await new_session(api, tenant, cid)
    assert stopped_session["status"] == "active"
    assert (await session_of(api, tenant, cid, sid))["action_count"] == 0


# -- the stream and its ticket ----------------------------------------------------------------


async def test_the_stream_replays_from_the_start_then_goes_live_and_closes_after_the_end(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    shot = await acted(api, tenant, cid, sid, "screenshot")
    moved = await acted(api, tenant, cid, sid, "move", x=5, y=6)
    ticket = await sse_ticket(api, tenant, cid, sid)
    async with open_sse(api.client, f"{events_url(cid, sid)}?ticket={ticket}") as stream:
        await stream.wait_connected()
        replayed = [await stream.next_frame() for _ in range(3)]
        assert [f.event for f in replayed] == ["cua.action", "cua.screenshot", "cua.action"]
        assert replayed[0].data["action_id"] == shot["action_id"] and replayed[2].data["action_id"] == moved["action_id"]
        assert replayed[2].data == {"action_id": moved["action_id"], "action": "move", "params": {"x": 5, "y": 6}, "ok": True,
                                    "duration_ms": moved["duration_ms"]}
        live = await acted(api, tenant, cid, sid, "wait", seconds=0)
        frame = await stream.next_frame()
        assert frame.event == "cua.action" and frame.data["action_id"] == live["action_id"]
        assert (await call(api, tenant, "POST", cid, f"{S}/{sid}/end")).status_code == 200
        last = await stream.next_frame()
        assert last.event == "cua.ended" and last.data == {"session_id": sid}
        with pytest.raises(EOFError):
            await stream.next_frame(timeout=5)  # closed after cua.ended
    ids = [f.id for f in [*replayed, frame, last]]
    assert all(ids) and ids == sorted(ids)  # type: ignore[type-var]

    # An ended session's stream: everything again from its start (bearer), then closed.
    async with open_sse(api.client, events_url(cid, sid), bearer(tenant)) as stream:
        frames = await stream.frames_until("cua.ended")
        assert [f.id for f in frames] == ids
        with pytest.raises(EOFError):
            await stream.next_frame(timeout=5)
    # After Last-Event-ID: only what came later.
    async with open_sse(api.client, events_url(cid, sid), {**bearer(tenant), "Last-Event-ID": ids[2] or ""}) as stream:
        frames = await stream.frames_until("cua.ended")
        assert [f.id for f in frames] == ids[3:]
        with pytest.raises(EOFError):
            await stream.next_frame(timeout=5)
    # After the end itself: nothing more, and closed.
    with trio.fail_after(10):
        async with open_sse(api.client, events_url(cid, sid), {**bearer(tenant), "Last-Event-ID": ids[-1] or ""}) as stream:
            with pytest.raises(EOFError):
                await stream.next_frame(timeout=8)


async def test_a_ticket_is_single_use_and_opens_only_its_session(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    mine = (await new_session(api, tenant, cid))["id"]
    other = (await new_session(api, tenant, cid))["id"]
    ticket = await sse_ticket(api, tenant, cid, mine)
    record = await api.platform.db.fetch_one("SELECT expires_at, purpose FROM sse_tickets WHERE used_at IS NULL ORDER BY expires_at DESC LIMIT 1")
    assert record is not None and record["purpose"] == f"cua:{mine}"
    assert abs((parse_iso(record["expires_at"]) - utc_now()).total_seconds() - 3600) < 30
    # Elsewhere it opens nothing, and stays unused.
    assert_error(await api.request("GET", f"{events_url(cid, other)}?ticket={ticket}"), 401, "UNAUTHORIZED")
    assert_error(await api.request("GET", f"{API}/computers/{cid}/events?ticket={ticket}"), 401, "UNAUTHORIZED")
    assert_error(await api.request("GET", f"{API}/computers/{cid}/logs/stream?ticket={ticket}"), 401, "UNAUTHORIZED")
    # Its own stream: once.
    async with open_sse(api.client, f"{events_url(cid, mine)}?ticket={ticket}") as stream:
        await stream.wait_connected()
    assert_error(await api.request("GET", f"{events_url(cid, mine)}?ticket={ticket}"), 401, "UNAUTHORIZED")
    # Without any credential; with a made-up ticket.
    missing = assert_error(await api.request("GET", events_url(cid, mine)), 401, "UNAUTHORIZED")
    assert missing["message"] == "missing sse ticket"
    assert_error(await api.request("GET", f"{events_url(cid, mine)}?ticket=sset_nonsense"), 401, "UNAUTHORIZED")
    # The general ticket of POST /auth/sse-ticket opens it too (as it opens every stream its key may read).
    general = (await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)).json()["ticket"]
    async with open_sse(api.client, f"{events_url(cid, other)}?ticket={general}") as stream:
        await stream.wait_connected()


async def test_a_stream_closes_when_its_computer_is_deleted(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    other_session = (await new_session(api, tenant, cid))["id"]
    async with open_sse(api.client, events_url(cid, sid), bearer(tenant)) as stream:
        await stream.wait_connected()
        assert (await call(api, tenant, "DELETE", cid)).status_code == 200
        with pytest.raises(EOFError):
            await stream.next_frame(timeout=10)
    # Its sessions went with it.
    count = await api.platform.db.fetch_value("SELECT COUNT(*) FROM computer_cua_sessions WHERE computer_id = ?", (cid,))
    assert count == 0
    for path in (f"{S}/{sid}", f"{S}/{other_session}", S):
        assert_error(await call(api, tenant, "GET", cid, path), 404, "COMPUTER_NOT_FOUND")


# -- who may do what --------------------------------------------------------------------------


def routes(sid: str) -> list[tuple[str, str, Any]]:
    return [
        ("POST", S, {}),
        ("GET", S, None),
        ("GET", f"{S}/{sid}", None),
        ("POST", f"{S}/{sid}/actions", {"action": "screenshot"}),
        ("POST", f"{S}/{sid}/end", None),
        ("POST", f"{S}/{sid}/sse-ticket", None),
        ("GET", f"{S}/{sid}/events", None),
    ]


async def test_every_route_is_404_for_another_tenant(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    other = await api.create_tenant("Other")
    for method, path, body in routes(sid):
        assert_error(await call(api, other, method, cid, path, json=body), 404, "COMPUTER_NOT_FOUND")
    # Nor does the other tenant's ticket open it.
    theirs = await create_running(api, other)
    their_session = (await new_session(api, other, theirs["id"]))["id"]
    their_ticket = await sse_ticket(api, other, theirs["id"], their_session)
    assert_error(await api.request("GET", f"{events_url(cid, sid)}?ticket={their_ticket}"), 401, "UNAUTHORIZED")
    general = (await api.request("POST", f"{API}/auth/sse-ticket", key=other.key)).json()["ticket"]
    assert_error(await api.request("GET", f"{events_url(cid, sid)}?ticket={general}"), 404, "COMPUTER_NOT_FOUND")
    assert (await session_of(api, tenant, cid, sid))["status"] == "active"


async def test_unknown_sessions_and_another_computers_sessions_are_404(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    elsewhere = await create_running(api, tenant)
    theirs = (await new_session(api, tenant, elsewhere["id"]))["id"]
    for sid in (theirs, "00000000-0000-4000-8000-000000000000", "not-a-uuid"):
        for method, path, body in routes(sid)[2:]:
            response = await call(api, tenant, method, cid, path, json=body)
            assert_error(response, 404, "NOT_FOUND")
    assert_error(await call(api, tenant, "GET", "not-a-uuid", S), 400, "INVALID_ID")


async def test_reads_need_the_read_scope_and_changes_the_write_scope(desk: Desk) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    sid = (await new_session(api, tenant, cid))["id"]
    made = await api.request("POST", f"{API}/api-keys", key=tenant.key, json={"name": "ro", "key_type": "user", "scopes": ["computers:read"]})
    assert made.status_code == 201, made.text
    reader = made.json()["data"]["key"]
    assert (await api.request("GET", f"{API}/computers/{cid}{S}/{sid}", key=reader)).status_code == 200
    assert (await api.request("POST", f"{API}/computers/{cid}{S}/{sid}/sse-ticket", key=reader)).status_code == 200
    for method, path in (("POST", S), ("POST", f"{S}/{sid}/actions"), ("POST", f"{S}/{sid}/end")):
        refused = await api.request(method, f"{API}/computers/{cid}{path}", key=reader, json={"action": "screenshot"})
        assert_error(refused, 403, "insufficient_scope")
