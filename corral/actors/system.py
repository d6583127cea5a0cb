"""`ActorSystem`: the registry of live actors, activation, passivation, shutdown.

All activation goes through `cell_for`, the one place that decides where an actor
lives; a multi-node lease (DESIGN.md, "Where the edges are") will slot in there.

Run it inside a nursery; it reports readiness through `nursery.start`::

    async with open_actor_system(db, services=services) as system:
        ref = await system.get(SandboxActor, sandbox_id)
        sandbox = await ref.ask(GetSandbox())

    # or, beside other services:
    system = ActorSystem(db, services=services)
    await nursery.start(system.run)
    ...
    await system.shutdown()          # graceful, then hard after `shutdown_grace`

Failed actors: after the supervisor gives up, the actor is unloaded and its record
marked `error` (by `on_failed`); it is listed by `introspect()` with status
`failed`. A later `get` activates it afresh from that record, whose `error` state
the transition table then governs (typically: only delete is allowed).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import trio

from corral.actors.actor import Actor
from corral.actors.bus import EventBus
from corral.actors.errors import RETIRED, ActorStopped
from corral.actors.introspection import FailureRecord, describe_cell, describe_failure
from corral.actors.ref import ActorRef
from corral.actors.supervisor import ActorCell, CellStatus, SupervisionPolicy
from corral.storage import Database, EventLog

log = logging.getLogger("corral.actors")

A = TypeVar("A", bound=Actor)


@dataclass(frozen=True)
class ActorConfig:
    """System-wide defaults; an actor class may override the per-kind ones.

    `idle_timeout` is in seconds (`math.inf`: never passivate). `shutdown_grace` is
    how long `shutdown` waits for actors to finish their current message and
    `on_stop` before cancelling everything.
    """

    mailbox_size: int = 64
    idle_timeout: float = 300.0
    max_crashes: int = 5
    crash_window: float = 60.0
    restart_backoff: float = 0.05
    restart_backoff_max: float = 2.0
    shutdown_grace: float = 10.0
    failures_kept: int = 1000


class ActorSystem:
    """Holds the database, the event bus, injected services and the live actors.

    `services` is whatever the application passes (a dataclass or namespace with the
    runtime driver, secret box, settings...): actors read `self.services.runtime`.
    """

    def __init__(
        self,
        db: Database,
        *,
        bus: EventBus | None = None,
        services: Any = None,
        config: ActorConfig | None = None,
    ) -> None:
        self.db = db
        self.bus = bus if bus is not None else EventBus(EventLog(db))
        self.services: Any = services if services is not None else SimpleNamespace()
        self.config = config or ActorConfig()
        self._cells: dict[tuple[str, str], ActorCell] = {}
        self._kinds: dict[str, type[Actor]] = {}
        self._failures: dict[tuple[str, str], FailureRecord] = {}
        self.retired = RetiredTotals()
        """Restarts and crashes of cells gone, by kind: with the live cells', the metrics' totals."""
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._shutdown_requested = trio.Event()
        self._finished = trio.Event()

    # --- running -------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[ActorSystem] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until `shutdown()`; `await nursery.start(system.run)` returns the system."""
        if self._nursery is not None or self._finished.is_set():
            raise RuntimeError("an ActorSystem runs once")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.bus.run)
                task_status.started(self)
                await self._shutdown_requested.wait()
                await self._stop_all(self.config.shutdown_grace)
                nursery.cancel_scope.cancel()
        finally:
            self._stopping = True
            self.bus.close()
            self._finished.set()

    async def shutdown(self, grace: float | None = None) -> None:
        """Graceful, then hard: queued messages are refused with `ActorStopped` at once,
        each actor finishes its current message and runs `on_stop`; whatever is still
        running after `grace` seconds (default `config.shutdown_grace`) is cancelled."""
        if grace is not None:
            self.config = _replace(self.config, shutdown_grace=grace)
        self._stopping = True
        self._shutdown_requested.set()
        if self._nursery is not None:
            await self._finished.wait()

    async def _stop_all(self, grace: float) -> None:
        self._stopping = True
        cells = list(self._cells.values())
        for cell in cells:
            cell.request_stop()
        with trio.move_on_after(grace) as scope:
            for cell in cells:
                await cell.finished.wait()
        if scope.cancelled_caught:
            log.warning("shutdown grace of %g s expired: cancelling the remaining actors", grace)

    @property
    def stopping(self) -> bool:
        return self._stopping

    # --- references and activation ----------------------------------------------------

    def ref(self, actor_class: type[A], actor_id: str) -> ActorRef[A]:
        """A reference without activating; the first `ask`/`tell` activates."""
        self._register_kind(actor_class)
        return ActorRef(self, actor_class, actor_id)

    def register(self, *actor_classes: type[Actor]) -> None:
        """Make kinds known up front, so that `ref_of_kind` finds them before first use."""
        for actor_class in actor_classes:
            self._register_kind(actor_class)

    def ref_of_kind(self, kind: str, actor_id: str) -> ActorRef[Any]:
        """A reference by kind name, for a module that cannot import the actor's class
        without a circle (a child actor reporting to its parent's actor)."""
        actor_class = self._kinds.get(kind)
        if actor_class is None:
            raise LookupError(f"no actor kind {kind!r} is registered")
        return ActorRef(self, actor_class, actor_id)

    def retire(self, kind: str, actor_id: str) -> None:
        """Stop the actor of `kind` and `actor_id` if it is active on this node (what it
        owned lives elsewhere now): it finishes the message it handles; queued ones are
        refused. The next message activates it afresh."""
        cell = self._cells.get((kind, actor_id))
        if cell is not None:
            cell.request_stop(RETIRED)

    def view_of(self, actor_class: type[Actor], actor_id: str) -> Any:
        """The live actor's `published_view()`, without a message; None when it is not
        active on this node, is handling a message, or publishes nothing."""
        cell = self._cells.get((actor_class.kind, actor_id))
        return cell.view if cell is not None else None

    async def get(self, actor_class: type[A], actor_id: str) -> ActorRef[A]:
        """Activate the actor if needed (raising its activation error) and return a ref.

        Concurrent `get`s of one id share one activation.
        """
        ref = self.ref(actor_class, actor_id)
        await self.cell_for(actor_class, actor_id)
        return ref

    async def create(self, actor_class: type[A], actor_id: str, draft: Any) -> ActorRef[A]:
        """Activate a new actor with `draft`, what its record is made from.

        The actor's `on_activate` finds no record and makes one from `self.draft`
        (`RecordActor.create_record`), so a resource's first row is written by its own
        actor; an error it raises (a limit, a conflict) comes back here and nothing
        stays loaded. `actor_id` must be new.
        """
        key = (actor_class.kind, actor_id)
        if key in self._cells:
            raise RuntimeError(f"{actor_class.kind} {actor_id} is already active")
        ref = self.ref(actor_class, actor_id)
        await self.cell_for(actor_class, actor_id, draft=draft)
        return ref

    def _register_kind(self, actor_class: type[Actor]) -> None:
        kind = getattr(actor_class, "kind", None)
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{actor_class.__name__} must set a `kind`")
        known = self._kinds.setdefault(kind, actor_class)
        if known is not actor_class:
            raise TypeError(f"kind {kind!r} is already served by {known.__name__}")

    async def cell_for(self, actor_class: type[Actor], actor_id: str, draft: Any = None) -> ActorCell:
        """The one place actors are found or activated (the `Registry` refs resolve through).
        A `draft` goes to the first activation of a new cell (see `create`)."""
        key = (actor_class.kind, actor_id)
        while True:
            if self._stopping or self._nursery is None:
                raise ActorStopped(
                    actor_class.kind, actor_id, "unavailable: the system is not running"
                )
            cell = self._cells.get(key)
            if cell is None:
                self._register_kind(actor_class)
                cell = self._new_cell(actor_class, actor_id)
                cell.draft = draft
                self._cells[key] = cell
                self._nursery.start_soon(cell.run, name=f"actor {key[0]}/{actor_id}")
            if cell.status in (CellStatus.PASSIVATING, CellStatus.FAILED, CellStatus.STOPPED):
                await cell.finished.wait()  # let it unload, then activate afresh
                continue
            await cell.ready.wait()
            if cell.activation_error is not None:
                raise cell.activation_error
            return cell

    def _new_cell(self, actor_class: type[Actor], actor_id: str) -> ActorCell:
        config = self.config

        def pick(override: Any, default: Any) -> Any:
            return default if override is None else override

        policy = SupervisionPolicy(
            max_crashes=pick(actor_class.max_crashes, config.max_crashes),
            window=pick(actor_class.crash_window, config.crash_window),
            backoff=config.restart_backoff,
            backoff_max=config.restart_backoff_max,
        )
        return ActorCell(
            self,
            actor_class,
            actor_id,
            mailbox_size=pick(actor_class.mailbox_size, config.mailbox_size),
            idle_timeout=pick(actor_class.idle_timeout, config.idle_timeout),
            policy=policy,
            on_exit=self._forget_cell,
            on_give_up=self._record_failure,
        )

    def _forget_cell(self, cell: ActorCell) -> None:
        key = (cell.kind, cell.id)
        if self._cells.get(key) is cell:
            del self._cells[key]
        self.retired.add(cell)

    def _record_failure(self, cell: ActorCell) -> None:
        key = (cell.kind, cell.id)
        self.retired.failures[cell.kind] += 1
        self._failures.pop(key, None)
        self._failures[key] = FailureRecord(
            kind=cell.kind,
            id=cell.id,
            state=cell.last_state,
            restarts=cell.restarts,
            crashes=len(cell.crash_times),
            last_error=cell.last_error,
            failed_at=trio.current_time(),
            created_at=cell.created_at,
        )
        while len(self._failures) > self.config.failures_kept:
            self._failures.pop(next(iter(self._failures)))

    # --- introspection ------------------------------------------------------------------

    def cells(self) -> list[ActorCell]:
        """The live cells, read as they are (the metrics' collectors walk them at scrape time)."""
        return list(self._cells.values())

    def introspect(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every live actor (and every failed one not re-activated since), by kind and id."""
        rows = [describe_cell(c) for c in self._cells.values() if kind in (None, c.kind)]
        rows += [
            describe_failure(f)
            for key, f in self._failures.items()
            if kind in (None, f.kind) and key not in self._cells
        ]
        rows.sort(key=lambda row: (row["kind"], row["id"]))
        return rows

    def introspect_one(self, kind: str, actor_id: str) -> dict[str, Any] | None:
        """One actor's details, or None when it is neither live nor failed (a 404)."""
        cell = self._cells.get((kind, actor_id))
        if cell is not None:
            return describe_cell(cell)
        failure = self._failures.get((kind, actor_id))
        return describe_failure(failure) if failure is not None else None

    def __len__(self) -> int:
        return len(self._cells)


class RetiredTotals:
    """Counters of cells that have exited, by kind, so totals survive passivation."""

    def __init__(self) -> None:
        self.restarts: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        """Supervisor give-ups (after repeated crashes)."""

    def add(self, cell: ActorCell) -> None:
        if cell.restarts:
            self.restarts[cell.kind] += cell.restarts
        if cell.crashes:
            self.crashes[cell.kind] += cell.crashes


def _replace(config: ActorConfig, **changes: Any) -> ActorConfig:
    return dataclasses.replace(config, **changes)


@asynccontextmanager
async def open_actor_system(
    db: Database,
    *,
    bus: EventBus | None = None,
    services: Any = None,
    config: ActorConfig | None = None,
) -> AsyncIterator[ActorSystem]:
    """Run an `ActorSystem` for the duration of the block, then shut it down.

    An exception from the block comes out as itself, not wrapped in an
    `ExceptionGroup`, so callers can `except ApiError` around it.
    """
    system = ActorSystem(db, bus=bus, services=services, config=config)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(system.run)
            try:
                yield system
            finally:
                with trio.CancelScope(shield=True):
                    with trio.move_on_after(system.config.shutdown_grace + 1) as scope:
                        await system.shutdown()
                    if scope.cancelled_caught:
                        nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
