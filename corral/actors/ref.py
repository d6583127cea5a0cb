"""`ActorRef`: how callers talk to an actor: `ask` for a reply, `tell` to notify.

A ref is only a name (system, class, id): it stays valid across passivation and
restarts, activating the actor again when needed. The HTTP layer can hold none and
call `system.get` per request; a child task can keep one.

With a tracer provider installed (only when spans are exported), each `ask` and `tell`
is a span in the caller's trace, named `<kind> <MessageType>`: the ask's covers the
wait for room, the queue and the handling.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import trio

from corral.actors.actor import Actor
from corral.actors.errors import AskTimeout
from corral.actors.mailbox import MailboxClosed
from corral.actors.messages import Envelope, Reply
from corral.tracer import recording_tracer

if TYPE_CHECKING:
    from corral.actors.mailbox import Mailbox

A = TypeVar("A", bound=Actor)


def _span(ref: ActorRef[Any], message: Any, call: str) -> AbstractContextManager[object]:
    """A span for one message, or nothing at all while no tracer provider is installed."""
    tracer = recording_tracer(__name__)
    if tracer is None:
        return nullcontext()
    message_type = type(message).__name__
    return tracer.start_as_current_span(
        f"{ref.kind} {message_type}",
        attributes={
            "corral.actor.kind": ref.kind,
            "corral.actor.id": ref.id,
            "corral.actor.message": message_type,
            "corral.actor.call": call,
        },
    )


class Deliverable(Protocol):
    """A live actor, as far as a ref is concerned: somewhere to put messages."""

    @property
    def mailbox(self) -> Mailbox: ...


class Registry(Protocol):
    """Where refs resolve: finds a live actor or activates it (the `ActorSystem`)."""

    async def cell_for(self, actor_class: type[Actor], actor_id: str) -> Deliverable: ...


class ActorRef(Generic[A]):
    def __init__(self, system: Registry, actor_class: type[A], actor_id: str) -> None:
        self.system = system
        self.actor_class = actor_class
        self.id = actor_id

    @property
    def kind(self) -> str:
        return self.actor_class.kind

    def __repr__(self) -> str:
        return f"<ActorRef {self.kind}/{self.id}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ActorRef)
            and other.system is self.system
            and (other.kind, other.id) == (self.kind, self.id)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.id))

    async def ask(self, message: Any, *, timeout: float | None = None) -> Any:
        """Send `message` and return the handler's reply, or raise its `ApiError`.

        Activates the actor when needed (its activation error is raised here). When
        the mailbox is full it waits for room (backpressure). `timeout` covers the
        whole exchange and raises `AskTimeout` (504); a message not yet started when
        the caller gives up is skipped. If the actor crashes, this raises
        `ActorCrashed` (500) at once; during shutdown, `ActorStopped` (503).
        """
        self.actor_class.check_accepts(message)
        envelope = Envelope(message, Reply())
        assert envelope.reply is not None
        with _span(self, message, "ask"):
            try:
                with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                    await self._deliver(envelope, wait_for_room=True)
                    return await envelope.reply.wait()
            finally:
                if not envelope.reply.done:
                    envelope.abandoned = True
            assert scope.cancelled_caught
            raise AskTimeout(self.kind, self.id, float(timeout or 0))

    async def tell(self, message: Any) -> None:
        """Queue `message` without waiting for its handling; no reply, no error report.

        Awaiting only activates the actor when needed (its activation error is
        raised here); it never waits for room: a full mailbox raises `MailboxFull`
        (503) so fire-and-forget senders cannot pile up unseen.
        """
        self.actor_class.check_accepts(message)
        with _span(self, message, "tell"):
            await self._deliver(Envelope(message), wait_for_room=False)

    async def _deliver(self, envelope: Envelope, *, wait_for_room: bool) -> None:
        while True:
            cell = await self.system.cell_for(self.actor_class, self.id)
            try:
                if wait_for_room:
                    await cell.mailbox.put(envelope)
                else:
                    cell.mailbox.put_nowait(envelope)
                return
            except MailboxClosed as closed:
                if closed.reason is None:
                    await trio.lowlevel.checkpoint()
                    continue  # it passivated under us: activate it again
                raise closed.reason() from None
