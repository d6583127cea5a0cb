"""Writes nobody waits for: queued, then committed together some milliseconds later.

An exec through the API used to wait on four commits it did not need the outcome of:
its two events, its audit row and the sandbox's activity time, each a hop to the
writer thread and a commit (issue 28). Those rows are facts the caller's answer does
not depend on; what matters is that they land, in order, and that whoever reads them
on this node sees them. So:

- `WriteBehind.add` queues a statement and returns at once while the writer runs;
  without a running writer (tests that build parts alone, or after shutdown began)
  the caller writes directly instead;
- the writer commits whatever is queued in one transaction, `DELAY` seconds after the
  first statement of a batch came in (or at once when `MAX_BATCH` are waiting): 20 ms,
  because a commit on the writer thread slows the requests running beside it (an exec
  loop was 0.13 ms an exec faster with one commit per 50 ms than with one per exec);
- `flush` commits what is queued now: readers of those tables call it first, so a
  replay or a listing on this node never misses a row already answered for;
- stopping the writer commits what is left, shielded from the cancellation.

A row queued here survives anything but the process dying in those milliseconds,
which is the trade the contract allows for events, audit rows and activity times.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .database import Database, Transaction

log = logging.getLogger("corral.storage")

DELAY = 0.02
MAX_BATCH = 500

Statement = tuple[str, Sequence[Any]]


class WriteBehind:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._queued: list[Statement] = []
        self._wake = trio.Event()
        self._lock = trio.Lock()
        self.running = False
        self.written = 0
        self.delay = DELAY
        """How long a batch waits for company before it commits (`DELAY`; a node whose
        events other nodes wait for commits sooner, `remote_events.COMMIT_DELAY`)."""

    @property
    def pending(self) -> int:
        return len(self._queued)

    async def add(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Queue the statement (or, without a running writer, execute it now)."""
        if not self.running:
            await self.db.execute(sql, params)
            return
        self._queued.append((sql, tuple(params)))
        if len(self._queued) == 1 or len(self._queued) >= MAX_BATCH:
            self._wake.set()

    async def flush(self) -> None:
        """Commit everything queued so far (readers call this before they read)."""
        async with self._lock:
            batch, self._queued = self._queued, []
            if not batch:
                return
            try:
                await self.db.transaction(lambda tx: _execute_all(tx, batch))
            except Exception:
                # One bad statement must not lose the others: each on its own, logged.
                log.exception("a batch of %d deferred writes failed; writing them one by one", len(batch))
                for sql, params in batch:
                    try:
                        await self.db.execute(sql, params)
                    except Exception:
                        log.exception("a deferred write failed: %s", sql.split("(")[0])
            self.written += len(batch)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer: commit batches until cancelled, then what is left."""
        self.running = True
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if len(self._queued) < MAX_BATCH:
                    await trio.sleep(self.delay)
                await self.flush()
        finally:
            self.running = False
            with trio.CancelScope(shield=True):
                await self.flush()


def _execute_all(tx: Transaction, batch: list[Statement]) -> None:
    for sql, params in batch:
        tx.execute(sql, params)
