"""Messages, and the envelope that carries one message and its reply slot.

A message is any object; subclassing `Message` (as a frozen dataclass) is the
convention. An `Envelope` pairs it with a `Reply`, a one-shot slot the actor fills
exactly once with a value or an exception, which the asking task awaits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio
from opentelemetry import context as otel_context

from corral import current_request


class Message:
    """Base class of actor messages; define each as a frozen dataclass, e.g.
    `@dataclass(frozen=True) class Stop(Message): force: bool = False`.

    Handlers are found by message class (`@handles(Stop)`), so a message's type
    is its name; its fields are its arguments.
    """


class Reply:
    """A one-shot answer: the first `succeed` or `fail` wins; later ones are ignored."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def succeed(self, value: Any) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(eq=False)
class Envelope:
    """One message in a mailbox. `reply` is None for `tell`.

    `abandoned` is set when the asking caller gave up (timeout or cancellation): the
    actor skips an abandoned message it has not started, because nobody would learn
    its outcome.
    """

    message: Any
    reply: Reply | None = None
    abandoned: bool = False
    enqueued_at: float = field(default_factory=trio.current_time)
    request: Any = field(default_factory=current_request.current)
    """The API request the sender was serving (`corral.current_request`): the handler
    runs as part of it, for its log lines' request id."""
    trace_context: Any = field(default_factory=otel_context.get_current)
    """The sender's trace context: the handler's spans join the sender's trace."""

    def succeed(self, value: Any) -> None:
        if self.reply is not None:
            self.reply.succeed(value)

    def fail(self, error: BaseException) -> None:
        if self.reply is not None:
            self.reply.fail(error)
