"""Tiny "this changed, read it again" notices between the nodes of one PostgreSQL store.

Each node keeps routing tables in memory (the preview router's sandbox entries, share
links, deployment hosts, preview domains) so that a request costs no store round
trip. Most changes to them are announced by an event, which every node hears
(`RemoteEvents`); the few that have no event of their own (exposing a port, revoking
a share link, a preview domain configured or removed, a deployment's routing
rebuilt) must not become tenants' events, so the node that made the change sends a
notice instead: `NOTIFY corral_notices, '<origin>:<topic>:<subject>'`, after the
change committed. The other nodes hear it within milliseconds and drop or re-read
their copy; the payload names what changed, never its new value: the store stays
the one source of truth.

`listen(topic, handler)` registers a handler called with the subject of each change,
made on this node (`tell` calls it at once) or on another; after the LISTEN
connection was lost and opened again, every handler is called with None ("anything
may have changed meanwhile: read everything again"), since NOTIFY keeps nothing for
a node that did not listen.
A node skips its own notices: its handlers ran when it told them. `tell` never
waits for the store (a sender task sends what was told, oldest first, each notice
once even if told twice meanwhile); `tell_others` is for a table that its maker
already brought up to date itself.

On a SQLite store (one node) no notice leaves the node: `tell` only calls this
node's handlers, as the parts called each other before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import trio

from .database import Database, PostgresDatabase
from .pg_listen import RETRY_SECONDS, listen_forever

log = logging.getLogger("corral.storage.notices")

CHANNEL = "corral_notices"
MAX_PENDING = 10_000
"""Beyond this many unsent notices (the store is unreachable), the oldest are dropped:
the other nodes read everything again when they reconnect anyway."""

Handler = Callable[[str | None], None]
"""Called with a notice's subject, or None after a reconnect (read everything again)."""


class Notices:
    """Sends this node's notices and hands other nodes' ones to the registered handlers."""

    def __init__(self, db: Database, origin: str, *, retry_seconds: Sequence[float] = RETRY_SECONDS) -> None:
        self.db = db
        self.origin = origin
        """Names this process in its payloads (the event log's origin): its own are skipped."""
        self.enabled = db.dialect == "postgresql"
        self.retry_seconds = tuple(retry_seconds)
        self._handlers: dict[str, list[Handler]] = {}
        self._pending: dict[str, None] = {}
        self._wake = trio.Event()
        self.sent = 0
        self.heard = 0
        self.reconnects = 0
        self.connected = trio.Event()
        self._listened = False

    # -- sending --------------------------------------------------------------------

    def tell(self, topic: str, subject: str = "") -> None:
        """`subject` of `topic` changed (call it once the change committed): this node's
        handlers drop their copies now, the other nodes' when they hear it."""
        self._hand_over(topic, subject)
        self.tell_others(topic, subject)

    def tell_others(self, topic: str, subject: str = "") -> None:
        """Only the other nodes' handlers: this node already brought its own copy up to date."""
        if not self.enabled:
            return
        if len(self._pending) >= MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))
        self._pending[f"{self.origin}:{topic}:{subject}"] = None
        self._wake.set()

    async def _send_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._pending:
                payload = next(iter(self._pending))
                try:
                    await self.db.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))
                except Exception as exc:  # the store is away: try again shortly, keep the order
                    log.warning("sending a notice to the other nodes failed (%s); retrying", exc)
                    await trio.sleep(self.retry_seconds[-1])
                    continue
                self._pending.pop(payload, None)
                self.sent += 1

    # -- hearing --------------------------------------------------------------------

    def listen(self, topic: str, handler: Handler) -> None:
        """Call `handler(subject)` for each notice of `topic` from another node (and
        `handler(None)` after a reconnect)."""
        self._handlers.setdefault(topic, []).append(handler)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send and listen until cancelled; on SQLite, return at once."""
        if not self.enabled:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_forever)
            await nursery.start(self._listen_forever)
            task_status.started()

    async def _listen_forever(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        db = self.db
        assert isinstance(db, PostgresDatabase)
        await listen_forever(
            lambda: db.url, CHANNEL, "corral-notices", self._listen_on, what="other nodes' notices",
            retry_seconds=self.retry_seconds, on_loss=self._on_loss, task_status=task_status,
        )

    async def _listen_on(self, pgconn: Any, ready: Callable[[], None]) -> None:
        """After a reconnect, every table reads again (a notice sent meanwhile is gone);
        then hand over what the connection hears until it fails."""
        self.connected.set()
        ready()
        if self._listened:
            self.reconnects += 1
            self._everything_changed()
        self._listened = True
        await self._drain(pgconn)

    def _on_loss(self) -> None:
        self.connected = trio.Event()

    async def _drain(self, pgconn: Any) -> None:
        from psycopg import pq

        own = f"{self.origin}:"
        fd = pgconn.socket
        while True:
            while (notify := pgconn.notifies()) is not None:
                payload = notify.extra.decode()
                if not payload.startswith(own):
                    _, _, rest = payload.partition(":")
                    topic, _, subject = rest.partition(":")
                    self.heard += 1
                    self._hand_over(topic, subject)
            await trio.lowlevel.wait_readable(fd)
            pgconn.consume_input()  # raises OperationalError once the connection is gone
            if pgconn.status != pq.ConnStatus.OK:
                raise ConnectionError(pgconn.get_error_message() or "the connection is closed")

    def _hand_over(self, topic: str, subject: str | None) -> None:
        for handler in self._handlers.get(topic, ()):
            try:
                handler(subject)
            except Exception:  # one table's failure must not stop the others' notices
                log.exception("handling a %s notice from another node failed", topic)

    def _everything_changed(self) -> None:
        log.info("listening for other nodes' notices again; every table reads the store again")
        for topic in list(self._handlers):
            self._hand_over(topic, None)
