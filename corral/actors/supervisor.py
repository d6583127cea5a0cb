"""`ActorCell`: one actor id's life: activation, the message loop, supervision.

A cell outlives the incarnations of its actor: it keeps the identity (kind, id),
the counters introspection shows, and the crash history. Each incarnation is a
fresh instance with its own nursery (for children); when it crashes the cell
answers every waiting caller at once, waits an exponential backoff and activates a
new instance from storage. After `max_crashes` crashes within `crash_window`
seconds it gives up: it calls the class's `on_failed` hook (mark the record
`error`) and publishes `<kind>.error`.

The cell's task never lets an exception escape into the system's nursery: a
resource's failure must not take the platform down.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio
from opentelemetry import context as otel_context

from corral import current_request
from corral.actors.actor import Actor
from corral.actors.errors import ActorCrashed, ActorStopped, MailboxFull
from corral.actors.host import ActorHost
from corral.actors.mailbox import Mailbox
from corral.actors.messages import Envelope
from corral.actors.runtime_errors import public_message
from corral.errors import ApiError
from corral.storage import Event

log = logging.getLogger("corral.actors")


class CellStatus(enum.StrEnum):
    ACTIVATING = "activating"
    ALIVE = "alive"
    RESTARTING = "restarting"
    PASSIVATING = "passivating"
    STOPPING = "stopping"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class SupervisionPolicy:
    """Restart with exponential backoff; give up after `max_crashes` in `window` s."""

    max_crashes: int = 5
    window: float = 60.0
    backoff: float = 0.05
    backoff_max: float = 2.0

    def delay(self, recent_crashes: int) -> float:
        return float(min(self.backoff * 2 ** max(recent_crashes - 1, 0), self.backoff_max))


class _Exit(enum.Enum):
    PASSIVATED = "passivated"
    STOPPED = "stopped"


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


class ActorCell:
    def __init__(
        self,
        system: ActorHost,
        actor_class: type[Actor],
        actor_id: str,
        *,
        mailbox_size: int,
        idle_timeout: float,
        policy: SupervisionPolicy,
        on_exit: Callable[[ActorCell], None],
        on_give_up: Callable[[ActorCell], None],
    ) -> None:
        """`on_exit` is called once the cell has stopped for good (passivated, stopped or
        failed); `on_give_up` when supervision gives up after repeated crashes. The
        system passes its own bookkeeping; the cell knows nothing else of it."""
        self.system = system
        self._on_exit = on_exit
        self._on_give_up = on_give_up
        self.actor_class = actor_class
        self.kind = actor_class.kind
        self.id = actor_id
        self.view: Any = None
        """The actor's `published_view()` as of its last message (None while one is handled)."""
        self.mailbox_size = mailbox_size
        self.idle_timeout = idle_timeout
        self.policy = policy
        self.mailbox = self._new_mailbox()
        self.status = CellStatus.ACTIVATING
        self.ready = trio.Event()
        self.finished = trio.Event()
        self.activation_error: BaseException | None = None
        #: what the first activation makes a new record from (`ActorSystem.create`).
        self.draft: Any = None
        self.actor: Actor | None = None
        self.tenant_id: str | None = None
        self.last_state: str | None = None
        now = trio.current_time()
        self.created_at = now
        self.activated_at: float | None = None
        self.last_activity = now
        self.handled = 0
        self.restarts = 0
        self.crashes = 0
        """Every crash of this cell (`crash_times` keeps only the window's): the metrics' total."""
        self.crash_times: deque[float] = deque()
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.current: Envelope | None = None
        self.children = 0
        self._children_nursery: trio.Nursery | None = None
        self._child_error: BaseException | None = None
        self._stop_requested = False
        self._stop_reason = "shutting down"
        self._backoff_scope: trio.CancelScope | None = None

    def _new_mailbox(self) -> Mailbox:
        return Mailbox(self.mailbox_size, lambda: MailboxFull(self.kind, self.id))

    def _crashed(self, error: BaseException | None = None) -> ActorCrashed:
        crashed = ActorCrashed(self.kind, self.id, error)
        crashed.__cause__ = error
        return crashed

    def _stopped(self) -> ActorStopped:
        return ActorStopped(self.kind, self.id, self._stop_reason)

    @property
    def state(self) -> str | None:
        """The live actor's state, else the last one seen (while restarting)."""
        return self.last_state if self.actor is None else self.actor.state

    # --- control from other tasks ----------------------------------------------------

    def request_stop(self, reason: str = "shutting down") -> None:
        """Graceful stop: refuse queued and new messages now (`reason` says why: "the
        <kind> actor is <reason>"), finish the current one, then `on_stop`, then cancel
        children. Synchronous: safe from any task."""
        if self._stop_requested:
            return
        self._stop_requested = True
        self._stop_reason = reason
        if self.status in (CellStatus.ALIVE, CellStatus.ACTIVATING):
            self.status = CellStatus.STOPPING
        self._refuse(self.mailbox.close(self._stopped), self._stopped)
        if self._backoff_scope is not None:
            self._backoff_scope.cancel()

    def spawn(self, function: Callable[..., Awaitable[Any]], *args: Any, name: str | None) -> None:
        if self._children_nursery is None:
            raise RuntimeError("the actor has no running nursery")
        self.children += 1

        async def child() -> None:
            try:
                await function(*args)
            except Exception as error:
                if self._child_error is None:
                    self._child_error = error
                raise
            finally:
                self.children -= 1
                self.last_activity = trio.current_time()

        self._children_nursery.start_soon(child, name=name or f"{self.kind}:{self.id}:child")

    # --- the cell's task ---------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._lifecycle()
        except Exception as error:  # a kernel bug; never take the system down
            log.exception("actor %s/%s: supervisor failed", self.kind, self.id)
            self.activation_error = self.activation_error or self._crashed(error)
        finally:
            self.actor = None
            self.view = None
            if self.status not in (CellStatus.FAILED,):
                self.status = CellStatus.STOPPED
            self._refuse(self.mailbox.close(self._stopped), self._stopped)
            self._on_exit(self)
            self.ready.set()
            self.finished.set()

    async def _lifecycle(self) -> None:
        first = True
        while True:
            try:
                exit_reason = await self._incarnation()
            except _ActivationRefused as refused:
                # an ApiError from on_activate: the record is gone or refuses; stop.
                self._give_back(refused.error)
                return
            except _Crash as crash:
                if first and self.activated_at is None:
                    self._give_back(self._crashed(crash.error))
                    return
                if await self._after_crash(crash.error):
                    return
                first = False
                continue
            if exit_reason is _Exit.PASSIVATED:
                log.debug("actor %s/%s passivated", self.kind, self.id)
            return

    def _give_back(self, error: BaseException) -> None:
        """Activation refused: the getters (first time) or queued callers get `error`."""
        self.activation_error = error
        self._refuse(self.mailbox.close(lambda: error), lambda: error)

    async def _incarnation(self) -> _Exit:
        actor = self.actor_class(self.id, self.system)
        actor.attach(self)
        self._child_error = None
        phase = "activate"
        error: BaseException | None = None
        exit_reason = _Exit.STOPPED
        try:
            async with trio.open_nursery() as children:
                self._children_nursery = children
                await actor.on_activate()
                self.draft = None  # made: a restart loads the record instead
                actor.mark_persisted()
                self.actor = actor
                self.tenant_id = actor.tenant_id
                self.last_state = actor.state
                self.activated_at = trio.current_time()
                self.last_activity = self.activated_at
                if self.status in (CellStatus.ACTIVATING, CellStatus.RESTARTING):
                    self.status = CellStatus.ALIVE
                self.ready.set()
                phase = "serve"
                exit_reason = await self._serve(actor)
                await self._wind_down(actor, exit_reason)
                children.cancel_scope.cancel()
        except* Exception as group:
            leaves = _leaves(group)
            error = self._child_error or leaves[0]
        finally:
            self._children_nursery = None
            self.actor = None if error is not None else self.actor
        if error is not None:
            if phase == "activate" and isinstance(error, ApiError) and self._child_error is None:
                raise _ActivationRefused(error)
            raise _Crash(error)
        return exit_reason

    async def _serve(self, actor: Actor) -> _Exit:
        while True:
            if self._stop_requested:
                return _Exit.STOPPED
            with trio.move_on_after(self.idle_timeout) as idle:
                try:
                    envelope = await self.mailbox.get()
                except trio.EndOfChannel:
                    return _Exit.STOPPED
            if idle.cancelled_caught:
                if (
                    self.children == 0
                    and self.mailbox.depth == 0
                    and self.mailbox.blocked_senders == 0
                ):
                    # No await between the check and the close: nobody can slip in.
                    self.status = CellStatus.PASSIVATING
                    self.mailbox.close(None)
                    return _Exit.PASSIVATED
                continue
            if envelope.abandoned:
                continue
            await self._handle(actor, envelope)

    async def _handle(self, actor: Actor, envelope: Envelope) -> None:
        self.current = envelope
        self.view = None
        # The handler runs as part of the sender's request and trace (`Envelope`).
        request_token = current_request.enter(envelope.request)
        trace_token = otel_context.attach(envelope.trace_context)
        try:
            result = await actor.receive(envelope.message)
        except ApiError as error:
            self._check_persisted(actor)
            self.view = actor.published_view()
            envelope.fail(error)
        except Exception as error:
            envelope.fail(self._crashed(error))
            raise
        except BaseException:
            # Cancelled: a child crashed (the nursery is unwinding) or a hard shutdown.
            envelope.fail(
                self._crashed(self._child_error) if self._child_error else self._stopped()
            )
            raise
        else:
            try:
                self._check_persisted(actor)
            except Exception as error:
                envelope.fail(self._crashed(error))
                raise
            self.view = actor.published_view()
            envelope.succeed(result)
        finally:
            otel_context.detach(trace_token)
            current_request.leave(request_token)
            self.current = None
            self.last_state = actor.persisted_state
            self.handled += 1
            self.last_activity = trio.current_time()

    def _check_persisted(self, actor: Actor) -> None:
        if actor.state != actor.persisted_state:
            raise RuntimeError(
                f"{type(actor).__name__} changed state to {actor.state!r} without persist()"
            )

    async def _wind_down(self, actor: Actor, exit_reason: _Exit) -> None:
        hook = actor.on_passivate if exit_reason is _Exit.PASSIVATED else actor.on_stop
        try:
            await hook()
        except Exception:
            log.exception("actor %s/%s: %s failed", self.kind, self.id, hook.__name__)

    # --- supervision ---------------------------------------------------------------------

    async def _after_crash(self, error: BaseException) -> bool:
        """Answer everyone, then back off (False) or give up (True)."""
        now = trio.current_time()
        self.last_error = describe_error(error)
        self.last_error_at = now
        self.crash_times.append(now)
        self.crashes += 1
        while self.crash_times and self.crash_times[0] < now - self.policy.window:
            self.crash_times.popleft()
        log.warning("actor %s/%s crashed: %s", self.kind, self.id, self.last_error, exc_info=error)
        # Every queued caller and every sender blocked on the full mailbox is answered now;
        # callers arriving from here on queue in a fresh mailbox for the next incarnation.
        old, self.mailbox = self.mailbox, self._new_mailbox()
        self._refuse(old.close(self._crashed), self._crashed)
        if self._stop_requested:
            return True
        if len(self.crash_times) >= self.policy.max_crashes:
            await self._give_up(error)
            return True
        self.status = CellStatus.RESTARTING
        with trio.move_on_after(self.policy.delay(len(self.crash_times))) as scope:
            self._backoff_scope = scope
            await trio.sleep_forever()
        self._backoff_scope = None
        if self._stop_requested:
            return True
        self.restarts += 1
        return False

    async def _give_up(self, error: BaseException) -> None:
        self.status = CellStatus.FAILED
        self._refuse(self.mailbox.close(self._crashed), self._crashed)
        self._on_give_up(self)
        log.error("actor %s/%s failed after %d crashes", self.kind, self.id, len(self.crash_times))
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            reporter = self.actor_class(self.id, self.system)
            reporter.tenant_id = self.tenant_id
            try:
                await reporter.on_failed(error)
            except Exception:
                log.exception("actor %s/%s: on_failed failed", self.kind, self.id)
            event = Event(
                f"{self.kind}.error",
                self.kind,
                self.id,
                {
                    "id": self.id,
                    "error": f"{type(error).__name__}: {public_message(error)}"[:500],  # the log has the rest
                    "crashes": len(self.crash_times),
                    "restarts": self.restarts,
                },
                tenant_id=self.tenant_id,
            )
            try:
                await self.system.bus.publish(event)
            except Exception:
                log.exception("actor %s/%s: publishing %s failed", self.kind, self.id, event.type)

    @staticmethod
    def _refuse(envelopes: list[Envelope], error: Callable[[], BaseException]) -> None:
        for envelope in envelopes:
            envelope.fail(error())


class _Crash(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _ActivationRefused(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
