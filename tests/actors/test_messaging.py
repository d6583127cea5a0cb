"""ask / tell, ordering, bounded mailboxes, activation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from corral.actors import ActorConfig, ActorSystem, AskTimeout, MailboxFull, open_actor_system
from corral.errors import ApiError
from corral.storage import Database
from tests.actors.machine import (
    Add,
    Get,
    MachineActor,
    Note,
    Probe,
    Start,
    WaitForGate,
    create_machine,
)


async def test_ask_returns_the_reply_and_tell_is_handled_in_order(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    assert (await ref.ask(Get()))["status"] == "stopped"
    for i in range(5):
        await ref.tell(Note(f"told-{i}"))
    assert await ref.ask(Note("asked")) == "asked"
    assert probe.notes == [f"told-{i}" for i in range(5)] + ["asked"]


async def test_one_message_at_a_time(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    results: list[str] = []

    async def send(i: int) -> None:
        results.append(await ref.ask(Note(str(i), pause=0.01)))

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(send, i)
    assert probe.max_handling == 1
    assert sorted(results) == sorted(probe.notes) == sorted(str(i) for i in range(10))


async def test_a_message_without_handler_is_refused_in_the_sender(system: ActorSystem) -> None:
    ref = system.ref(MachineActor, "m1")
    with pytest.raises(TypeError):
        await ref.ask(object())


async def test_bounded_mailbox_backpressure_and_mailbox_full(
    machines_db: Database, probe: Probe
) -> None:
    config = ActorConfig(mailbox_size=2, shutdown_grace=0.5)
    await create_machine(machines_db, "m1")
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as system:
        ref = await system.get(MachineActor, "m1")
        answers: list[str] = []

        async def ask_gate() -> None:
            answers.append(await ref.ask(WaitForGate(), timeout=5))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask_gate)  # being handled, blocked on the gate
            await trio.testing.wait_all_tasks_blocked()
            await ref.tell(Note("a"))
            await ref.tell(Note("b"))  # the mailbox (2) is now full
            assert system.introspect_one("machine", "m1")["mailbox_depth"] == 2  # type: ignore[index]
            with pytest.raises(MailboxFull) as full:
                await ref.tell(Note("c"))
            assert full.value.status == 503
            # ask waits for room (backpressure), up to its timeout
            with pytest.raises(AskTimeout) as slow:
                await ref.ask(Note("d"), timeout=0.1)
            assert slow.value.status == 504
            nursery.start_soon(ask_gate)  # waits for room, then is served
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.set()
        assert answers == ["through", "through"]
        # "d" timed out before it was queued: never handled; a and b were.
        assert probe.notes == ["a", "b"]


async def test_an_abandoned_ask_is_skipped(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ref.ask, WaitForGate())
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(AskTimeout):
            await ref.ask(Note("late"), timeout=0.05)
        probe.gate.set()
    assert await ref.ask(Note("next")) == "next"
    assert probe.notes == ["next"]


async def test_concurrent_gets_activate_once(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    probe.activation_delay = 0.05
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(system.get, MachineActor, "m1")
    assert probe.activations == 1
    assert len(system) == 1


async def test_failed_activation_raises_and_registers_nothing(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    errors: list[ApiError] = []

    async def get_missing() -> None:
        try:
            await system.get(MachineActor, "missing")
        except ApiError as error:
            errors.append(error)

    probe.activation_delay = 0.02
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(get_missing)
    assert [e.status for e in errors] == [404, 404, 404]
    assert probe.activations == 1
    assert len(system) == 0 and system.introspect() == []
    # an unexpected activation error reaches the caller as a 500, also unregistered
    await create_machine(machines_db, "m2")
    probe.crash_on_activate = True
    with pytest.raises(ApiError) as crashed:
        await system.get(MachineActor, "m2")
    assert crashed.value.status == 500
    assert len(system) == 0
    probe.crash_on_activate = False
    ref = await system.get(MachineActor, "m2")
    assert (await ref.ask(Start()))["status"] == "running"


async def test_a_ref_survives_passivation_and_reactivates(
    machines_db: Database, probe: Probe
) -> None:
    await create_machine(machines_db, "m1")
    config = ActorConfig(idle_timeout=0.1)
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as system:
        ref = await system.get(MachineActor, "m1")
        assert await ref.ask(Start())
        await trio.sleep(0.2)
        assert probe.passivated == ["m1"]
        assert system.introspect() == []
        # the same ref activates it again, from its persisted record
        assert await ref.ask(Add(2)) == 2
        assert probe.activations == 2


async def test_a_retired_actor_refuses_its_queued_messages_saying_to_send_them_again(
    system: ActorSystem, machines_db: Database, probe: Probe
) -> None:
    """What an actor owned lives on another node now (`ActorSystem.retire`): the message it
    handles is answered, the queued ones get a 503 that says to send the request again
    (which the HTTP layer then forwards to the new home), and the next one activates it
    afresh."""
    await create_machine(machines_db, "m1")
    ref = await system.get(MachineActor, "m1")
    answers: list[object] = []

    async def ask(message: object) -> None:
        try:
            answers.append(await ref.ask(message))
        except ApiError as error:
            answers.append(error)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, WaitForGate())
        await trio.sleep(0.05)
        nursery.start_soon(ask, Note("queued"))
        await trio.sleep(0.05)
        system.retire(MachineActor.kind, "m1")
        probe.gate.set()
    refused = next(answer for answer in answers if isinstance(answer, ApiError))
    assert (refused.status, refused.code) == (503, "SERVICE_UNAVAILABLE")
    assert refused.message == f"the {MachineActor.kind} actor is now on another node; send the request again"
    assert "queued" not in probe.notes
    assert await ref.ask(Note("later")) == "later"
