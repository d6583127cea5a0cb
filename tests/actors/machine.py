"""A small resource actor over its own table, used to exercise the kernel."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import trio

from corral.actors import Message, RecordActor, TransitionTable, handles
from corral.actors.record import RowStore
from corral.storage import Database, utc_now_iso

TABLE = """
CREATE TABLE test_machines (
    id TEXT PRIMARY KEY,
    tenant_id TEXT,
    status TEXT NOT NULL,
    counter BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class MachineRecord:
    id: str
    tenant_id: str | None
    status: str
    counter: int
    last_error: str | None
    updated_at: str


MACHINES = RowStore("test_machines", MachineRecord)


async def create_machine(db: Database, machine_id: str, status: str = "stopped") -> None:
    await db.execute(
        "INSERT INTO test_machines (id, tenant_id, status, counter, updated_at) VALUES (?, ?, ?, 0, ?)",
        (machine_id, "tenant-1", status, utc_now_iso()),
    )


async def machine_row(db: Database, machine_id: str) -> dict[str, Any]:
    row = await db.fetch_one("SELECT * FROM test_machines WHERE id = ?", (machine_id,))
    assert row is not None
    return row


@dataclass(frozen=True)
class Start(Message):
    pass


@dataclass(frozen=True)
class Stop(Message):
    pass


@dataclass(frozen=True)
class Get(Message):
    pass


@dataclass(frozen=True)
class Add(Message):
    amount: int = 1


@dataclass(frozen=True)
class Note(Message):
    """Records its text in handling order, after yielding (to expose interleaving)."""

    text: str
    pause: float = 0.0


@dataclass(frozen=True)
class Crash(Message):
    after: float = 0.0


@dataclass(frozen=True)
class WaitForGate(Message):
    pass


@dataclass(frozen=True)
class Forever(Message):
    pass


@dataclass(frozen=True)
class SneakyStateChange(Message):
    pass


@dataclass(frozen=True)
class LongWork(Message):
    amount: int
    crash: bool = False


@dataclass(frozen=True)
class WorkDone(Message):
    amount: int


@dataclass
class Probe:
    """The services object: lets tests observe and steer the actor."""

    activations: int = 0
    activation_delay: float = 0.0
    crash_on_activate: bool = False
    notes: list[str] = field(default_factory=list)
    handling: int = 0
    max_handling: int = 0
    passivated: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    gate: trio.Event = field(default_factory=trio.Event)
    work_gate: trio.Event = field(default_factory=trio.Event)
    save_delay: float = 0.0


class MachineActor(RecordActor):
    kind = "machine"
    store = MACHINES
    record: MachineRecord
    error_column = "last_error"
    transitions = TransitionTable(
        {
            ("stopped", Start): "running",
            ("running", Stop): "stopped",
            ("running", Add): "running",
        },
        refusals={
            Start: ("INVALID_STATE", "machine cannot be started from its current status"),
            Add: ("MACHINE_NOT_RUNNING", "machine is not running"),
        },
    )

    @property
    def probe(self) -> Probe:
        probe: Probe = self.services.probe
        return probe

    async def on_activate(self) -> None:
        self.probe.activations += 1
        await trio.sleep(self.probe.activation_delay)
        if self.probe.crash_on_activate:
            raise RuntimeError("runtime driver unavailable")
        await super().on_activate()

    async def on_passivate(self) -> None:
        self.probe.passivated.append(self.id)

    async def on_stop(self) -> None:
        self.probe.stopped.append(self.id)

    async def on_failed(self, error: BaseException) -> None:
        self.probe.failed.append(self.id)
        await super().on_failed(error)

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        await trio.sleep(self.probe.save_delay)
        await super().save(state, fields)

    def describe(self) -> dict[str, Any]:
        return {"counter": self.record.counter}

    @handles(Get)
    async def get(self, message: Get) -> dict[str, Any]:
        return dataclasses.asdict(self.record)

    @handles(Start, Stop)
    async def start_or_stop(self, message: Start | Stop) -> dict[str, Any]:
        await self.apply(message)
        await self.emit("started" if isinstance(message, Start) else "stopped", {"id": self.id})
        return dataclasses.asdict(self.record)

    @handles(Add)
    async def add(self, message: Add) -> int:
        await self.apply(message, counter=self.record.counter + message.amount)
        return int(self.record.counter)

    @handles(Note)
    async def note(self, message: Note) -> str:
        self.probe.handling += 1
        self.probe.max_handling = max(self.probe.max_handling, self.probe.handling)
        await trio.sleep(message.pause)
        self.probe.notes.append(message.text)
        self.probe.handling -= 1
        return message.text

    @handles(Crash)
    async def crash(self, message: Crash) -> None:
        await trio.sleep(message.after)
        raise RuntimeError("boom")

    @handles(WaitForGate)
    async def wait_for_gate(self, message: WaitForGate) -> str:
        await self.probe.gate.wait()
        return "through"

    @handles(Forever)
    async def forever(self, message: Forever) -> None:
        await trio.sleep_forever()

    @handles(SneakyStateChange)
    async def sneaky(self, message: SneakyStateChange) -> None:
        self.state = "running"  # not persisted: the kernel must refuse this

    @handles(LongWork)
    async def long_work(self, message: LongWork) -> str:
        self.spawn(self._work, message.amount, message.crash)
        return "accepted"

    async def _work(self, amount: int, crash: bool) -> None:
        await self.probe.work_gate.wait()
        if crash:
            raise RuntimeError("child failed")
        await self.ref.tell(WorkDone(amount))

    @handles(WorkDone)
    async def work_done(self, message: WorkDone) -> None:
        await self.persist(counter=self.record.counter + message.amount)
