"""A bounded mailbox: a trio memory channel that can be closed with a reason.

Bounded so that a flood of requests turns into backpressure (`put` waits for room)
or a clear refusal (`put_nowait` raises `MailboxFull`) instead of unbounded memory.
Closing it with a reason wakes every sender blocked on a full mailbox with that
reason, and `drain` hands back what was queued so the owner can answer each caller
at once; nobody is left waiting on a mailbox that nobody reads.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from corral.actors.messages import Envelope

#: Builds the error a refused caller receives (one fresh exception per caller).
ErrorFactory = Callable[[], BaseException]


class MailboxClosed(Exception):
    """Raised by `put` on a closed mailbox. `reason` builds the caller's error; it is
    None when the actor passivated, and the caller should activate it anew."""

    def __init__(self, reason: ErrorFactory | None) -> None:
        super().__init__("mailbox closed")
        self.reason = reason


class Mailbox:
    def __init__(self, capacity: int, on_full: Callable[[], BaseException]) -> None:
        if capacity < 1:
            raise ValueError("a mailbox holds at least one message")
        self.capacity = capacity
        self._on_full = on_full
        self._send, self._receive = trio.open_memory_channel[Envelope](capacity)
        self._closed_reason: ErrorFactory | None = None
        self.closed = False

    @property
    def depth(self) -> int:
        """Messages waiting (not counting one being handled)."""
        return self._send.statistics().current_buffer_used

    @property
    def blocked_senders(self) -> int:
        return self._send.statistics().tasks_waiting_send

    async def put(self, envelope: Envelope) -> None:
        """Queue `envelope`, waiting for room when the mailbox is full (backpressure)."""
        try:
            await self._send.send(envelope)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise MailboxClosed(self._closed_reason) from None

    def put_nowait(self, envelope: Envelope) -> None:
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            raise self._on_full() from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise MailboxClosed(self._closed_reason) from None

    async def get(self) -> Envelope:
        """The next envelope; raises `trio.EndOfChannel` once closed and empty."""
        return await self._receive.receive()

    def close(self, reason: ErrorFactory | None) -> list[Envelope]:
        """Refuse further messages with `reason` and return those still queued."""
        if not self.closed:
            self.closed = True
            self._closed_reason = reason
            self._send.close()
        return self.drain()

    def drain(self) -> list[Envelope]:
        queued: list[Envelope] = []
        while True:
            try:
                queued.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return queued
