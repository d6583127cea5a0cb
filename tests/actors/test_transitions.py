"""Transition tables and persist-before-reply."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio

from corral.actors import ActorCrashed, ActorSystem, Message, TransitionTable
from corral.errors import ApiError, conflict
from corral.storage import Database
from tests.actors.machine import (
    Add,
    Get,
    MachineActor,
    Probe,
    SneakyStateChange,
    Start,
    Stop,
    create_machine,
    machine_row,
)


@dataclass(frozen=True)
class Delete(Message):
    pass


@dataclass(frozen=True)
class HardDelete(Delete):
    pass


def test_table_allows_declared_rows_and_refuses_the_rest() -> None:
    table = TransitionTable(
        {
            ("stopped", Start): "running",
            (("running", "starting"), Stop): "stopped",
            ("*", Delete): "deleted",
        },
        refusals={
            Start: ("INVALID_STATE", "computer cannot be started from its current status"),
            Stop: lambda state, message: conflict("SANDBOX_NOT_RUNNING", f"sandbox is {state}"),
        },
    )
    assert table.next_state("stopped", Start()) == "running"
    assert table.next_state("starting", Stop()) == "stopped"
    assert table.next_state("error", Delete()) == "deleted"
    assert table.next_state("running", HardDelete()) == "deleted"  # via the base class
    assert table.allows("running", Stop) and not table.allows("stopped", Stop)
    with pytest.raises(ApiError) as refused:
        table.next_state("running", Start())
    assert (refused.value.status, refused.value.code, refused.value.message) == (
        409,
        "INVALID_STATE",
        "computer cannot be started from its current status",
    )
    with pytest.raises(ApiError) as refused:
        table.next_state("stopped", Stop())
    assert (refused.value.code, refused.value.message) == (
        "SANDBOX_NOT_RUNNING",
        "sandbox is stopped",
    )
    with pytest.raises(ApiError) as refused:
        table.next_state("stopped", Get())
    assert (refused.value.status, refused.value.code) == (409, "INVALID_STATE")


async def test_actor_transitions_allow_and_refuse_with_409(
    system: ActorSystem, machines_db: Database
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    with pytest.raises(ApiError) as refused:
        await ref.ask(Add(1))
    assert (refused.value.status, refused.value.code) == (409, "MACHINE_NOT_RUNNING")
    assert (await ref.ask(Start()))["status"] == "running"
    with pytest.raises(ApiError) as refused:
        await ref.ask(Start())
    assert refused.value.message == "machine cannot be started from its current status"
    assert await ref.ask(Add(3)) == 3
    # refusals are not crashes
    info = system.introspect_one("machine", "m1")
    assert info is not None and info["restarts"] == 0 and info["last_error"] is None
    assert info["state"] == "running"


async def test_the_reply_arrives_only_after_the_row_is_updated(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    probe.save_delay = 0.05
    ref = await system.get(MachineActor, "m1")
    seen_while_waiting: list[str] = []

    async def watch() -> None:
        while True:
            seen_while_waiting.append((await machine_row(machines_db, "m1"))["status"])
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        reply = await ref.ask(Start())
        assert (await machine_row(machines_db, "m1"))["status"] == "running"
        nursery.cancel_scope.cancel()
    assert reply["status"] == "running"
    assert "stopped" in seen_while_waiting  # the reply really waited for the save


async def test_a_state_change_without_persist_is_a_crash(
    system: ActorSystem, machines_db: Database
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    with pytest.raises(ActorCrashed):
        await ref.ask(SneakyStateChange())
    # restarted from storage: the unpersisted change is gone
    assert (await ref.ask(Get()))["status"] == "stopped"
    info = system.introspect_one("machine", "m1")
    assert info is not None and info["state"] == "stopped" and info["restarts"] == 1
