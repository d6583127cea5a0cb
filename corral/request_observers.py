"""The node's observers of answered API requests (metrics, the access log, the operator
views), called in batches rather than once per request.

`observe.py` hands each answered request's record to `RequestObservers.record`, which
only keeps it. The records are passed to the observers `BATCH_SECONDS` later by `run`
(a task of the node), or at once when `BATCH_SIZE` have piled up, or when a
reader needs them current (`drain()`: the `/metrics` exposition and `GET /admin/node`
call it before they read). Why: in the live server each observer found its code and
data out of the CPU's caches after a request's worth of other work, and the three of
them cost about 30 µs a request; run back to back over a batch they cost under 9 µs
(issue 29: metrics and JSON logs under 5% of a request's cost in all). Nothing the
client waits for is in there either way: records are handed over after the answer
went out.

An observer is a plain function of one record, called on the event loop: it must be
quick and must not raise (one that does is logged and skipped). Below the layers:
the platform holds one, the HTTP layer feeds it, operations' parts observe it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import trio

log = logging.getLogger("corral.http")

BATCH_SECONDS = 0.02
"""How long a record may wait for its observers (metrics, access line) at most."""
BATCH_SIZE = 64
"""Records kept at most before they are handed over at once."""

Observer = Callable[[Any], None]


class RequestObservers:
    """A list of observers (`append`, `remove`, `in`, iteration) and the records waiting
    for them."""

    def __init__(self) -> None:
        self._observers: list[Observer] = []
        self._pending: list[Any] = []

    def append(self, observer: Observer) -> None:
        self._observers.append(observer)

    def remove(self, observer: Observer) -> None:
        self.drain()  # what it was due to see, it sees
        self._observers.remove(observer)

    def __contains__(self, observer: object) -> bool:
        return observer in self._observers

    def __iter__(self) -> Iterator[Observer]:
        return iter(list(self._observers))

    def __len__(self) -> int:
        return len(self._observers)

    def record(self, record: Any) -> None:
        """Keep `record` for the observers; hand the batch over if it is full."""
        self._pending.append(record)
        if len(self._pending) >= BATCH_SIZE:
            self.drain()

    def drain(self) -> None:
        """Hand every waiting record to every observer, in the order they were answered."""
        while self._pending:
            batch, self._pending = self._pending, []
            for observer in list(self._observers):
                for record in batch:
                    try:
                        observer(record)
                    except Exception:
                        log.exception("a request observer failed")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drain every `BATCH_SECONDS` until cancelled; drains once more when cancelled."""
        task_status.started()
        try:
            while True:
                await trio.sleep(BATCH_SECONDS)
                self.drain()
        finally:
            self.drain()
