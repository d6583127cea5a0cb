"""Events published on other nodes, heard through PostgreSQL LISTEN/NOTIFY.

On a PostgreSQL store every event row is inserted by a statement that also notifies
channel `corral_events` (`EventLog`), so the notification leaves when, and only when,
the row commits, whether it went through the write-behind queue or not: a node that
hears it can read the row. The payload is tiny (`<origin>:<event id>`, the origin
naming the publishing process); the event itself is read from the event log, which
stays the one source of truth, so an event of any size goes through.

`RemoteEvents` keeps one dedicated connection (not one of the pool's) in LISTEN and
waits on its socket from the trio thread, draining it with libpq's non-blocking calls
(psycopg's async API does not run under trio, and a thread parked on the socket could
not be cancelled). Each batch of notifications from other processes becomes one read
of their rows, handed to `deliver` (the bus's fan-out to this node's subscribers) in
commit order. Its own notifications are skipped: the bus offered those when they
were published.

A lost connection is reopened with backoff: LISTEN first, then the log is read from
`CATCH_UP_SECONDS` before the loss (covering the time a row waits in another node's
write-behind queue, and clock skew between nodes), and every event in it that was
neither delivered nor published here is delivered, in id order. For that the ids
delivered and published here (`published_here`) are remembered for
`REMEMBER_SECONDS`. Nothing of this runs on a SQLite store: it has one node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import trio

from .event_log import NOTIFY_CHANNEL, Event, EventLog
from .pg_listen import RETRY_SECONDS, listen_forever

log = logging.getLogger("corral.storage.remote_events")

CHANNEL = NOTIFY_CHANNEL
CATCH_UP_SECONDS = 30.0
REMEMBER_SECONDS = 60.0
"""Longer than `CATCH_UP_SECONDS`: a catch-up never meets an id it has forgotten."""
PAGE = 500
COMMIT_DELAY = 0.005
"""The write-behind delay of a node that shares its events (`WriteBehind.delay`, 20 ms
alone): another node hears an event only once its row commits, and the issue's goal
is 20 ms from publication to the other node's SSE frame (measured:
`tools/bench/node_events.py`)."""

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def ulid_floor(seconds: float) -> str:
    """The 10-character time prefix of the ULIDs made at `seconds` (Unix time): every
    event id of that millisecond or later sorts after it."""
    ms = max(0, int(seconds * 1000))
    return "".join(_CROCKFORD[(ms >> shift) & 31] for shift in range(45, -1, -5))


class RemoteEvents:
    """Delivers the events other nodes (processes) publish on the shared store."""

    commit_delay = COMMIT_DELAY

    def __init__(
        self,
        events: EventLog,
        deliver: Callable[[Event], None],
        *,
        url: str | None = None,
        retry_seconds: Sequence[float] = RETRY_SECONDS,
    ) -> None:
        self.events = events
        self.url = url or events.db.url
        """Where the LISTEN connection goes: the store's own URL unless told otherwise."""
        self.deliver = deliver
        self.retry_seconds = tuple(retry_seconds)
        self._known: dict[str, None] = {}
        """Ids delivered or published here, oldest first (roughly: eviction stops at
        the first young one)."""
        self._listening_since: float | None = None
        self._lost_at: float | None = None
        self._last_forget = 0.0
        self.connected = trio.Event()
        """Set while the LISTEN connection is up (a new object after each loss)."""
        self.backend_pid: int | None = None
        self.delivered = 0
        self.caught_up = 0
        """Of `delivered`, those found by reading the log after a reconnect."""
        self.reconnects = 0

    def published_here(self, event_id: str) -> None:
        """The bus published `event_id` on this node: a catch-up must not deliver it again."""
        self._known[event_id] = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; started once the first LISTEN is in place (or has
        failed: it is then retried like a lost connection)."""
        await listen_forever(
            lambda: self.url, NOTIFY_CHANNEL, "corral-events", self._listen_on, what="other nodes' events",
            retry_seconds=self.retry_seconds, on_loss=self._on_loss, task_status=task_status,
        )

    async def _listen_on(self, pgconn: Any, ready: Callable[[], None]) -> None:
        """Catch up after a loss, then deliver what the connection hears until it fails."""
        reconnected = self._listening_since is not None
        if not reconnected:
            self._listening_since = time.time()
        self.backend_pid = pgconn.backend_pid
        self.connected.set()
        ready()
        if reconnected:
            self.reconnects += 1
            before = self.caught_up
            await self._catch_up()
            log.info("listening for other nodes' events again; %d caught up from the log", self.caught_up - before)
        self._lost_at = None
        await self._drain(pgconn)

    def _on_loss(self) -> None:
        self.connected = trio.Event()
        if self._lost_at is None:
            self._lost_at = time.time()
        self._forget_old()

    async def _drain(self, pgconn: Any) -> None:
        """Deliver what each wake-up of the socket brings, until the connection fails."""
        prefix = self.events.notify_prefix
        fd = pgconn.socket
        while True:
            ids = []
            while (notify := pgconn.notifies()) is not None:
                payload = notify.extra.decode()
                if not payload.startswith(prefix):
                    ids.append(payload.partition(":")[2])
            if ids:
                await self._deliver_ids(ids)
                continue  # more may have come in meanwhile, already buffered
            self._forget_old()
            await trio.lowlevel.wait_readable(fd)
            pgconn.consume_input()  # raises OperationalError once the connection is gone
            if pgconn.status != _ok_status():
                raise ConnectionError(pgconn.get_error_message() or "the connection is closed")

    async def _deliver_ids(self, ids: list[str]) -> None:
        wanted = [event_id for event_id in ids if event_id not in self._known]
        if not wanted:
            return
        for start in range(0, len(wanted), PAGE):
            some = wanted[start : start + PAGE]
            found = {event.id: event for event in await self.events.with_ids(some)}
            self._hand_over(found[event_id] for event_id in some if event_id in found)

    async def _catch_up(self) -> None:
        """Deliver the logged events this node may have missed while it did not listen."""
        assert self._listening_since is not None
        lost_at = self._lost_at if self._lost_at is not None else time.time()
        after = ulid_floor(max(lost_at - CATCH_UP_SECONDS, self._listening_since))
        while True:
            page = await self.events.after(after, limit=PAGE)
            fresh = [event for event in page if event.id not in self._known]
            self.caught_up += len(fresh)
            self._hand_over(fresh)
            if len(page) < PAGE:
                return
            after = page[-1].id

    def _hand_over(self, events: Iterable[Event]) -> None:
        for event in events:
            if event.id in self._known:
                continue
            self._known[event.id] = None
            self.delivered += 1
            try:
                self.deliver(event)
            except Exception:  # one subscriber's failure must not stop the others' events
                log.exception("delivering event %s from another node failed", event.id)

    def _forget_old(self) -> None:
        """Drop remembered ids older than `REMEMBER_SECONDS` (at most once a second);
        while the connection is down, none from after the loss."""
        now = time.time()
        if now - self._last_forget < 1.0:
            return
        self._last_forget = now
        floor = ulid_floor(min(now, self._lost_at or now) - REMEMBER_SECONDS)
        known = self._known
        while known:
            oldest = next(iter(known))
            if oldest >= floor:
                return
            del known[oldest]


def _ok_status() -> Any:
    from psycopg import pq

    return pq.ConnStatus.OK
