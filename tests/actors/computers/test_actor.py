"""The computer actor driven directly (as the HTTP layer does), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

import pytest
import trio

from corral.actors import computers
from corral.actors.computers import (
    ComputerActor,
    DeleteSnapshot,
    Destroy,
    Get,
    IdleStop,
    Move,
    Pause,
    Resize,
    Restart,
    RestoreSnapshot,
    Sampler,
    SnapshotRecord,
    Start,
    Stop,
    TakeSnapshot,
    computer_metrics,
    resolved_env,
    set_env,
    stop_idle_computers,
)
from corral.actors.computers.snapshots import store as snapshot_store
from corral.errors import ApiError
from corral.ids import new_uuid
from tests.http.computer_support import create_running, run
from tests.support import Api, Tenant


async def refusal(ref: object, message: object) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await ref.ask(message)  # type: ignore[attr-defined]
    return caught.value


async def test_the_state_table(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    ref = await api.platform.system.get(ComputerActor, computer["id"])
    assert (await refusal(ref, Resize("large"))).status == 409
    assert (await refusal(ref, Start())).message == "computer cannot be started from its current status"
    assert (await ref.ask(Restart())).status == "running"
    assert (await ref.ask(Stop())).status == "stopped"
    assert (await refusal(ref, Pause())).message == "computer must be running to pause"
    assert (await ref.ask(Resize("medium"))).size == "medium"
    assert (await ref.ask(Move("local"))).region == "local"
    assert (await ref.ask(Start())).status == "running"
    stale = await refusal(ref, IdleStop(60, "2000-01-01T00:00:00.000000Z"))
    assert (stale.status, stale.message) == (409, "computer is no longer idle")
    assert (await ref.ask(Pause())).status == "paused"
    assert (await ref.ask(Start())).status == "running"
    row = await api.platform.db.fetch_one("SELECT status, size, vm_id FROM computers WHERE id = ?", (computer["id"],))
    assert row == {"status": "running", "size": "medium", "vm_id": computer["vm_id"]}
    assert await ref.ask(Destroy()) == {"id": computer["id"], "deleted": True}
    gone = await refusal(ref, Get())
    assert (gone.status, gone.code, gone.message) == (404, "COMPUTER_NOT_FOUND", "computer not found")
    assert await api.platform.db.fetch_one("SELECT 1 FROM computers WHERE id = ?", (computer["id"],)) is None


async def test_env_round_trip_and_the_clone_copy(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    row = await computers.store.load(api.platform.db, computer["id"])
    assert row is not None
    await set_env(api.platform, row, {"ONE": "1", "TWO": "zwei"})
    assert await resolved_env(api.platform, row) == {"ONE": "1", "TWO": "zwei"}
    assert (await run(api, owner, computer["id"], 'printf %s "$ONE$TWO"'))["output"] == "1zwei"


async def test_sampler_and_windows(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner, size="large")
    sampler = Sampler(api.platform)
    assert await sampler.sample() == 0  # the first reading only sets the baseline
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, api, owner, computer["id"], "timeout 1.5 sh -c 'while :; do :; done'")
        for _ in range(3):
            await trio.sleep(0.4)
            assert await sampler.sample() == 1
    row = await computers.store.load(api.platform.db, computer["id"])
    assert row is not None
    metrics = await computer_metrics(api.platform, row, "1h")
    cpu = [p["value"] for p in metrics["cpu_percent"]]
    # One busy core of four is 25 % on an idle machine; on a loaded one the loop gets
    # less of a core, but it always shows.
    assert len(cpu) == 3 and max(cpu) >= 2
    assert metrics["credits_per_hour"] == 12
    assert len((await computer_metrics(api.platform, row, "7d"))["cpu_percent"]) in (1, 2)
    assert await sampler.prune() == 0


async def test_the_idle_scan(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    assert await stop_idle_computers(api.platform) == 0  # auto-stop disabled
    await api.platform.db.execute(
        "UPDATE computers SET auto_stop = 60, last_activity_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?", (computer["id"],)
    )
    assert await stop_idle_computers(api.platform) == 1
    events = await api.platform.events.list("computer", computer["id"])
    assert [e.type for e in events[-2:]] == ["computer.idle", "computer.stopped"]
    assert events[-2].data["idle_seconds"] > 60


async def test_snapshots_through_the_actor(api: Api, owner: Tenant) -> None:
    computer = await create_running(api, owner)
    ref = await api.platform.system.get(ComputerActor, computer["id"])
    db = api.platform.db
    taken = await ref.ask(TakeSnapshot("through the actor"))
    assert isinstance(taken, SnapshotRecord) and taken.status == "creating" and taken.tenant_id == owner.id
    with trio.fail_after(30):
        while (record := await snapshot_store.load(db, taken.id)) is None or record.status == "creating":
            await trio.sleep(0.05)
    assert record.status == "ready" and isinstance(record.size_bytes, int) and record.size_bytes > 0
    assert record.ready_at is not None and record.error is None
    assert await snapshot_store.list_for_computer(db, computer["id"]) == [record]

    # A copy a restart cut short fails at the next start-up.
    cut_short = dataclasses.replace(record, id=new_uuid(), status="creating", size_bytes=None, ready_at=None)
    await db.transaction(lambda tx: snapshot_store.insert(tx, cut_short))
    assert await computers.recover_snapshots(api.platform) == 1
    failed = await snapshot_store.load(db, cut_short.id)
    assert failed is not None and failed.status == "failed" and failed.error == computers.snapshot_service.INTERRUPTED

    assert (await ref.ask(RestoreSnapshot(record.id))).status == "running"
    assert (await refusal(ref, RestoreSnapshot(failed.id))).code == "SNAPSHOT_NOT_READY"
    assert (await refusal(ref, DeleteSnapshot(new_uuid()))).code == "SNAPSHOT_NOT_FOUND"
    assert await ref.ask(DeleteSnapshot(record.id)) == {"id": record.id, "status": "deleted"}
    assert (await refusal(ref, DeleteSnapshot(record.id))).code == "already_deleted"
    assert [r.id for r in await snapshot_store.list_for_computer(db, computer["id"])] == [failed.id]
    await ref.ask(Destroy())
    assert await snapshot_store.all_for_computer(db, computer["id"]) == []
