"""Crashes answer every caller at once; restarts with backoff; giving up; children."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from corral.actors import ActorConfig, ActorCrashed, CellStatus, open_actor_system
from corral.actors.system import ActorSystem
from corral.errors import ApiError
from corral.storage import Database, EventLog
from tests.actors.machine import (
    Add,
    Crash,
    Get,
    LongWork,
    MachineActor,
    Note,
    Probe,
    Start,
    create_machine,
    machine_row,
)


async def test_a_crash_answers_every_queued_caller_at_once(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    outcomes: dict[str, tuple[str, float]] = {}

    async def call(name: str, message: object) -> None:
        try:
            await ref.ask(message, timeout=10)
            outcomes[name] = ("ok", trio.current_time())
        except ActorCrashed:
            outcomes[name] = ("crashed", trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "crasher", Crash(after=0.1))
        await trio.testing.wait_all_tasks_blocked()
        for i in range(5):
            nursery.start_soon(call, f"queued-{i}", Note(str(i)))
        await trio.testing.wait_all_tasks_blocked()
        assert system.introspect_one("machine", "m1")["mailbox_depth"] == 5  # type: ignore[index]
    assert {name: result for name, (result, _) in outcomes.items()} == {
        "crasher": "crashed",
        **{f"queued-{i}": "crashed" for i in range(5)},
    }
    crashed_at = outcomes["crasher"][1]
    assert all(at - crashed_at < 0.05 for _, at in outcomes.values())  # not their 10 s timeout
    assert probe.notes == []  # none of the queued messages ran on a half-dead actor

    # the supervisor restarted it: it serves again, from storage
    assert await ref.ask(Note("again"), timeout=5) == "again"
    info = system.introspect_one("machine", "m1")
    assert info is not None
    assert info["status"] == "alive" and info["restarts"] == 1
    assert info["last_error"] == "RuntimeError: boom"
    assert probe.activations == 2


async def test_the_crash_error_carries_its_cause(
    system: ActorSystem, machines_db: Database
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    with pytest.raises(ActorCrashed) as crashed:
        await ref.ask(Crash())
    assert crashed.value.status == 500 and crashed.value.code == "INTERNAL_ERROR"
    assert isinstance(crashed.value.__cause__, RuntimeError)


async def test_repeated_crashes_mark_the_resource_error_and_emit_an_event(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    config = ActorConfig(max_crashes=3, restart_backoff=0.01)
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as system:
        with system.bus.subscribe(resource_type="machine", types=["machine.error"]) as events:
            ref = await system.get(MachineActor, "m1")
            await ref.ask(Start())
            started = trio.current_time()
            for _ in range(3):
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
            with trio.fail_after(5):
                event = await events.receive()
        # backoff 0.01 then 0.02 between the crashes
        assert trio.current_time() - started >= 0.03
        assert event.type == "machine.error"
        assert event.resource_id == "m1" and event.tenant_id == "tenant-1"
        assert event.data["error"] == "RuntimeError: boom" and event.data["crashes"] == 3
        logged = await EventLog(machines_db).list("machine", "m1")
        assert [e.type for e in logged] == ["machine.started", "machine.error"]
        row = await machine_row(machines_db, "m1")
        assert row["status"] == "error" and row["last_error"] == "RuntimeError: boom"
        assert probe.failed == ["m1"]

        (info,) = system.introspect()
        assert info["status"] == "failed" and info["restarts"] == 2
        assert info["last_error"] == "RuntimeError: boom"

        # a later get activates afresh from the record, now in state "error"
        assert (await ref.ask(Get()))["status"] == "error"
        with pytest.raises(ApiError) as refused:
            await ref.ask(Add(1))
        assert refused.value.status == 409
        assert system.introspect_one("machine", "m1")["status"] == "alive"  # type: ignore[index]


async def test_crashes_in_activation_count_toward_giving_up(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    config = ActorConfig(max_crashes=3, restart_backoff=0.01)
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as system:
        ref = await system.get(MachineActor, "m1")
        probe.crash_on_activate = True  # every restart now fails
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())
        with trio.fail_after(5):
            while (await machine_row(machines_db, "m1"))["status"] != "error":
                await trio.sleep(0.01)
        assert probe.activations == 3  # the first, then two failed restarts
        assert system.introspect_one("machine", "m1")["status"] == str(CellStatus.FAILED)  # type: ignore[index]


async def test_child_tasks_keep_the_mailbox_flowing(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    assert await ref.ask(LongWork(5)) == "accepted"
    # the long work is still running, yet the actor answers at once
    with trio.fail_after(1):
        assert (await ref.ask(Get()))["counter"] == 0
        assert await ref.ask(Note("meanwhile")) == "meanwhile"
    assert system.introspect_one("machine", "m1")["children"] == 1  # type: ignore[index]
    probe.work_gate.set()
    with trio.fail_after(5):
        while (await machine_row(machines_db, "m1"))["counter"] != 5:
            await trio.sleep(0.01)
    assert system.introspect_one("machine", "m1")["children"] == 0  # type: ignore[index]


async def test_a_crashing_child_crashes_the_actor_and_it_restarts(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    assert await ref.ask(LongWork(1, crash=True)) == "accepted"
    probe.work_gate.set()
    with trio.fail_after(5):
        while probe.activations < 2:
            await trio.sleep(0.01)
    assert await ref.ask(Note("back")) == "back"
    info = system.introspect_one("machine", "m1")
    assert info is not None and info["restarts"] == 1
    assert info["last_error"] == "RuntimeError: child failed"
