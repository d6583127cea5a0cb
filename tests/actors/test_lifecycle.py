"""State across system restarts, passivation, graceful and hard shutdown, introspection."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from corral.actors import ActorConfig, ActorStopped, ActorSystem, open_actor_system
from corral.storage import Database
from tests.actors.machine import (
    Add,
    Forever,
    Get,
    MachineActor,
    Note,
    Probe,
    Start,
    WaitForGate,
    create_machine,
)


async def test_state_survives_a_restart_of_the_whole_system(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    services = SimpleNamespace(probe=probe)
    async with open_actor_system(machines_db, services=services) as system:
        ref = await system.get(MachineActor, "m1")
        await ref.ask(Start())
        assert await ref.ask(Add(7)) == 7
    async with open_actor_system(machines_db, services=services) as system:
        ref = await system.get(MachineActor, "m1")
        record = await ref.ask(Get())
        assert (record["status"], record["counter"]) == ("running", 7)
        assert system.introspect_one("machine", "m1")["state"] == "running"  # type: ignore[index]


async def test_idle_actors_passivate(machines_db: Database, probe: Probe) -> None:
    await create_machine(machines_db, "m1")
    await create_machine(machines_db, "m2")
    config = ActorConfig(idle_timeout=0.1)
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as system:
        quiet = await system.get(MachineActor, "m1")
        busy = await system.get(MachineActor, "m2")
        await quiet.ask(Get())
        for _ in range(6):
            await busy.ask(Note("tick"))
            await trio.sleep(0.04)
        assert probe.passivated == ["m1"]
        assert [row["id"] for row in system.introspect()] == ["m2"]
        await trio.sleep(0.15)
        assert probe.passivated == ["m1", "m2"]
        assert len(system) == 0


async def test_graceful_shutdown_finishes_the_current_message_and_refuses_the_queue(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    outcomes: dict[str, str] = {}
    async with trio.open_nursery() as outer:
        system = ActorSystem(
            machines_db,
            services=SimpleNamespace(probe=probe),
            config=ActorConfig(shutdown_grace=5),
        )
        await outer.start(system.run)
        ref = await system.get(MachineActor, "m1")

        async def call(name: str, message: object) -> None:
            try:
                outcomes[name] = await ref.ask(message)
            except ActorStopped as stopped:
                outcomes[name] = f"refused {stopped.status}"

        outer.start_soon(call, "current", Note("current", pause=0.1))
        await trio.testing.wait_all_tasks_blocked()
        for i in range(3):
            outer.start_soon(call, f"queued-{i}", Note(f"queued-{i}"))
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        with trio.fail_after(2):
            await system.shutdown()
        assert trio.current_time() - began < 1
    assert outcomes == {
        "current": "current",
        **{f"queued-{i}": "refused 503" for i in range(3)},
    }
    assert probe.notes == ["current"]
    assert probe.stopped == ["m1"]
    with pytest.raises(ActorStopped):
        await system.get(MachineActor, "m1")


async def test_shutdown_turns_hard_after_the_grace_period(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    errors: list[Exception] = []
    async with trio.open_nursery() as outer:
        system = ActorSystem(
            machines_db,
            services=SimpleNamespace(probe=probe),
            config=ActorConfig(shutdown_grace=0.1),
        )
        await outer.start(system.run)
        ref = await system.get(MachineActor, "m1")

        async def stuck() -> None:
            try:
                await ref.ask(Forever())
            except ActorStopped as error:
                errors.append(error)

        outer.start_soon(stuck)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        await system.shutdown()
        assert 0.1 <= trio.current_time() - began < 1
    assert len(errors) == 1


async def test_introspection(system: ActorSystem, machines_db: Database, probe: Probe) -> None:
    await create_machine(machines_db, "m1")
    await create_machine(machines_db, "m2")
    first = await system.get(MachineActor, "m1")
    await system.get(MachineActor, "m2")
    await first.ask(Start())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.ask, WaitForGate())
        await trio.testing.wait_all_tasks_blocked()
        await first.tell(Note("queued"))
        await trio.testing.wait_all_tasks_blocked()
        rows = system.introspect()
        assert [(r["kind"], r["id"]) for r in rows] == [("machine", "m1"), ("machine", "m2")]
        one = system.introspect_one("machine", "m1")
        assert one is not None
        expected = {
            "kind": "machine",
            "id": "m1",
            "status": "alive",
            "state": "running",
            "mailbox_depth": 1,
            "busy": True,
            "current_message": "WaitForGate",
            "restarts": 0,
            "last_error": None,
            "tenant_id": "tenant-1",
            "details": {"counter": 0},
        }
        assert {key: one[key] for key in expected} == expected
        assert one["age_seconds"] >= 0 and one["idle_seconds"] >= 0
        probe.gate.set()
    assert system.introspect_one("machine", "nope") is None
    assert system.introspect(kind="other") == []
