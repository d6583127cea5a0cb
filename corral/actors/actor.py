"""`Actor`: the base class of every resource actor.

An actor owns one resource's record and state machine. The kernel gives it one
message at a time (so handlers never race each other on `self`), persists-before-
replies by construction (the reply is sent only when the handler returns), and
restarts it from storage after a crash. A subclass declares:

- `kind`: the resource kind, e.g. `"sandbox"`; events are named `<kind>.<what>`;
- `on_activate()`: load the record and reconcile with the world;
- handlers: `@handles(SomeMessage)` methods that return the reply or raise `ApiError`;
- `transitions`: a `TransitionTable` consulted by `self.transition(message)`;
- `save(state, fields)`: how to persist (or inherit `RecordActor`, which does it for
  a table row).

Example (see `RecordActor` for the storage side)::

    @dataclass(frozen=True)
    class Start(Message): ...

    class ComputerActor(RecordActor):
        kind = "computer"
        table = "computers"
        transitions = TransitionTable(
            {("stopped", Start): "running"},
            refusals={Start: ("INVALID_STATE",
                              "computer cannot be started from its current status")},
        )

        @handles(Start)
        async def start(self, message: Start) -> dict:
            next_state = self.transition(message)          # or a 409
            await self.system.services.runtime.start(self.id)
            await self.persist(state=next_state)           # before the reply
            await self.emit("started", {"id": self.id})
            return self.record
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from corral.actors.bus import EventBus
from corral.actors.errors import RETIRED
from corral.actors.host import ActorHost, CellHandle, Teller
from corral.actors.transitions import TransitionTable
from corral.storage import Database, Event

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
A = TypeVar("A", bound="Actor")

#: `idle_timeout` value meaning "never passivate".
NEVER = math.inf


def handles(*message_types: type) -> Callable[[F], F]:
    """Mark an `async def handler(self, message)` as the handler of these message types.

    A message is dispatched to the handler of its class or of its nearest base class.
    """
    if not message_types:
        raise TypeError("handles() needs at least one message type")

    def mark(function: F) -> F:
        function.__actor_handles__ = message_types  # type: ignore[attr-defined]
        return function

    return mark


class Actor:
    """Base class of resource actors; see the module docstring for an example.

    Class attributes a subclass may set:

    - `kind` (required): the resource kind, unique within a system;
    - `transitions`: its `TransitionTable`;
    - `mailbox_size`, `idle_timeout` (seconds, or `NEVER`): override the system's
      defaults for this kind;
    - `max_crashes`, `crash_window`: override the supervision policy for this kind.

    Instance attributes the kernel provides: `id`, `system`, `state` (the persisted
    state; change it only through `persist`), `tenant_id` (set it in `on_activate`
    so events and failure reports carry it).
    """

    kind: ClassVar[str]
    transitions: ClassVar[TransitionTable | None] = None
    mailbox_size: ClassVar[int | None] = None
    idle_timeout: ClassVar[float | None] = None
    max_crashes: ClassVar[int | None] = None
    crash_window: ClassVar[float | None] = None
    _handlers: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[type, str] = {}
        for base in reversed(cls.__mro__[1:]):  # every base's, a mixin's too; the nearest wins
            handlers.update(vars(base).get("_handlers", {}))
        for name, member in vars(cls).items():
            for message_type in getattr(member, "__actor_handles__", ()):
                handlers[message_type] = name
        cls._handlers = handlers

    def __init__(self, actor_id: str, system: ActorHost) -> None:
        self.id = actor_id
        self.system = system
        self.state: str = "new"
        self.tenant_id: str | None = None
        self._persisted_state = self.state
        self._cell: CellHandle | None = None

    # --- what the kernel offers a subclass ------------------------------------------

    @property
    def db(self) -> Database:
        return self.system.db

    @property
    def bus(self) -> EventBus:
        return self.system.bus

    @property
    def services(self) -> Any:
        """The system's injected services (runtime driver, secret box, settings...)."""
        return self.system.services

    @property
    def ref(self) -> Teller:
        """A reference to this actor, e.g. for a child task to report back by `tell`."""
        return self.system.ref(type(self), self.id)

    def retire(self) -> None:
        """Stop this actor once the message it handles now is answered: what it owned
        lives elsewhere now (another node), and messages queued for it are refused (503:
        sent again, a request goes to the new home)."""
        if self._cell is not None:
            self._cell.request_stop(RETIRED)

    def transition(self, message: Any) -> str:
        """The state `message` leads to from the current state, or the table's 409."""
        if self.transitions is None:
            raise TypeError(f"{type(self).__name__} declares no transitions table")
        return self.transitions.next_state(self.state, message)

    async def persist(self, state: str | None = None, **fields: Any) -> None:
        """Write the new state and fields through `save`, then adopt them in memory.

        Call it before returning from a handler: the kernel refuses (as a crash) a
        handler that changed `self.state` without persisting it.
        """
        new_state = self.state if state is None else state
        await self.save(new_state, fields)
        self.state = new_state
        self._persisted_state = new_state

    async def apply(self, message: Any, **fields: Any) -> str:
        """`transition` then `persist`: the common shape of a state-changing handler."""
        next_state = self.transition(message)
        await self.persist(state=next_state, **fields)
        return next_state

    async def emit(self, what: str, data: dict[str, Any]) -> Event:
        """Publish `<kind>.<what>` about this resource on the bus (persisted first)."""
        event = Event(f"{self.kind}.{what}", self.kind, self.id, data, tenant_id=self.tenant_id)
        return await self.system.bus.publish(event)

    def spawn(
        self, function: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run `function(*args)` in this actor's own nursery, beside the mailbox.

        Use it for long work (a 300 s exec, a backup): the mailbox keeps flowing.
        The child should report results back with `await self.ref.tell(...)` so that
        state changes still go through a handler. A child that raises crashes the
        actor (it is restarted); children are cancelled on passivation and shutdown.
        """
        if self._cell is None:
            raise RuntimeError("spawn() is only available on an active actor")
        self._cell.spawn(function, *args, name=name)

    @property
    def draft(self) -> Any:
        """What a new actor's record is made from during its first activation
        (`ActorSystem.create`); None for an actor loaded from storage."""
        return None if self._cell is None else self._cell.draft

    @property
    def children(self) -> int:
        return 0 if self._cell is None else self._cell.children

    # --- what the supervisor calls ---------------------------------------------------

    def attach(self, cell: CellHandle) -> None:
        """This incarnation runs in `cell`: `spawn` starts children in its nursery."""
        self._cell = cell

    @property
    def persisted_state(self) -> str:
        """The state as last stored: a handler must not leave `state` different from it."""
        return self._persisted_state

    def mark_persisted(self) -> None:
        """The state `on_activate` loaded is the stored one."""
        self._persisted_state = self.state

    # --- hooks -----------------------------------------------------------------------

    def published_view(self) -> Any:
        """What readers on this node may see of the actor without sending a message
        (`ActorSystem.view_of`): None by default. Taken after each message is handled
        and withdrawn while the next one is, so a reader never sees a view that a
        message in progress may be changing; a reader that finds none asks."""
        return None

    async def on_activate(self) -> None:
        """Load the record, set `self.state`, reconcile with the runtime.

        Raise an `ApiError` (e.g. 404) to refuse activation: the caller of `get`
        receives it and nothing stays registered.
        """

    async def on_passivate(self) -> None:
        """Called when the actor goes idle and is unloaded (children already idle)."""

    async def on_stop(self) -> None:
        """Called on system shutdown after the current message; children still run
        until it returns, then they are cancelled. Instances keep running: the next
        start re-adopts them, so do not tear the resource down here."""

    async def on_failed(self, error: BaseException) -> None:
        """Called on a fresh, un-activated instance after the supervisor gave up:
        mark the resource `error` in storage. `RecordActor` does this for you."""

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        """Persist `state` and `fields`. `RecordActor` implements it for a table row."""
        raise NotImplementedError(f"{type(self).__name__} must implement save() to persist")

    def describe(self) -> dict[str, Any]:
        """Extra fields for introspection (keep it small and secret-free)."""
        return {}

    # --- dispatch --------------------------------------------------------------------

    @classmethod
    def handler_name(cls, message_type: type) -> str | None:
        for klass in message_type.__mro__:
            name = cls._handlers.get(klass)
            if name is not None:
                return name
        return None

    @classmethod
    def check_accepts(cls, message: Any) -> None:
        """Raise `TypeError` in the sender for a message this kind has no handler for."""
        if cls.handler_name(type(message)) is None and cls.receive is Actor.receive:
            raise TypeError(f"{cls.__name__} has no handler for {type(message).__name__}")

    async def receive(self, message: Any) -> Any:
        """Dispatch to the `@handles` method; override for a `match`-style actor."""
        name = self.handler_name(type(message))
        if name is None:
            raise TypeError(f"{type(self).__name__} has no handler for {type(message).__name__}")
        return await getattr(self, name)(message)
