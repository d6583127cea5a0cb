"""CUA sessions driven through their operations and actor, on SQLite and PostgreSQL:
the record matches its table, actions are counted and published, end is final, and
the sessions go with their computer."""

from __future__ import annotations

import dataclasses

import pytest

from corral.actors.computers import cua, find_computer
from corral.actors.computers.cua import CuaSessionActor, EndSession, GetSession, RecordAction
from corral.errors import ApiError
from tests.http.computer_support import call, create_running
from tests.support import Api, Tenant


async def test_a_session_from_start_to_end_and_gone_with_its_computer(api: Api, owner: Tenant) -> None:
    platform = api.platform
    computer = await find_computer(platform, owner.id, (await create_running(api, owner, resolution="640x480"))["id"])
    session = await cua.create_session(platform, computer, cua.NewSession(task="look", metadata={"n": 1}))
    row = await platform.db.fetch_one("SELECT * FROM computer_cua_sessions WHERE id = ?", (session.id,))
    assert row is not None and set(row) == {f.name for f in dataclasses.fields(cua.CuaSessionRecord)}
    assert await cua.store.load(platform.db, session.id) == session
    assert session.tenant_id == owner.id and session.status == "active"

    outcome = await cua.perform_action(platform, computer, session, {"action": "screenshot"})
    assert outcome.ok and outcome.screen == (640, 480) and outcome.result["width"] == 640
    ref = platform.system.ref(CuaSessionActor, session.id)
    assert (await ref.ask(GetSession())).action_count == 1
    ended = await cua.end_session(platform, session)
    assert ended.status == "ended" and ended.ended_at is not None
    assert await cua.store.load(platform.db, session.id) == ended
    with pytest.raises(ApiError) as refused:
        await ref.ask(RecordAction("act_x", "wait", {"seconds": 0}, True, 0))
    assert (refused.value.status, refused.value.code) == (409, "SESSION_ENDED")
    with pytest.raises(ApiError) as too_late:
        await cua.perform_action(platform, computer, ended, {"action": "wait", "seconds": 0})
    assert too_late.value.code == "SESSION_ENDED"
    assert await ref.ask(EndSession()) == ended
    events = await platform.events.list(cua.RESOURCE_TYPE, session.id)
    assert [e.type for e in events] == ["cua.action", "cua.screenshot", "cua.ended"]
    assert all(e.tenant_id == owner.id for e in events)

    assert (await call(api, owner, "DELETE", computer.id)).status_code == 200
    assert await cua.store.of_computer(platform.db, computer.id) == []
