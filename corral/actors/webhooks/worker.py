"""The delivery worker: claims due attempts from the queue and sends them.

It wakes when the dispatcher queues something on this node, when an earlier
attempt's retry falls due, and every `webhook_poll_interval` seconds (for rows
other nodes queued). Up to `concurrency` attempts are in flight at once.

Shutdown does not cut attempts off blindly: each runs in a shielded scope, and when
the worker is cancelled the in-flight ones get `shutdown_grace_seconds` to finish and
record their outcome. One still running after that is cancelled and its lease
released, so the next start (or another node) sends it again at once; only a crash
(no chance to release) waits for the lease to expire.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections import Counter
from datetime import timedelta

import trio

from corral.config import Settings
from corral.ids import new_ulid
from corral.storage import Database, SecretBox, parse_iso, to_iso, utc_now, utc_now_iso

from . import store
from .attempt import send_attempt
from .schedule import retry_delay
from .sender import Outcome, Sender
from .store import DeliveryRecord

log = logging.getLogger("corral.webhooks")

RETENTION = timedelta(days=30)
"""Finished attempts are kept this long, then pruned."""
PRUNE_INTERVAL = 3600.0
MIN_SLEEP = 0.02


class DeliveryWorker:
    def __init__(
        self, db: Database, settings: Settings, secrets: SecretBox, sender: Sender, *, concurrency: int = 16
    ) -> None:
        self.db = db
        self.settings = settings
        self.secrets = secrets
        self.sender = sender
        self.concurrency = concurrency
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{new_ulid()}"
        """This worker's name in `lease_owner`: unique per process and start."""
        self._wake = trio.Event()
        self._in_flight: set[trio.CancelScope] = set()
        self._stopping = False
        self._draining = False
        self.attempts = 0
        self.outcomes: Counter[str] = Counter()
        """Attempts by outcome (`delivered`, `failed`, `error`: the worker itself failed):
        plain counters the node's metrics read."""

    @property
    def stopping(self) -> bool:
        """True once the worker was cancelled: it claims nothing more, and what is in
        flight has until the shutdown grace ends."""
        return self._stopping

    def drain(self) -> None:
        """Claim nothing more: the node is stopping (what is in flight finishes; what is
        queued waits for the next start, or another node)."""
        self._draining = True

    def wake(self) -> None:
        """Look at the queue now (something was queued or finished)."""
        self._wake.set()

    def delay_for(self, attempt: int, retry_count: int) -> float | None:
        return retry_delay(attempt, retry_count, scale=self.settings.webhook_retry_scale)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            try:
                await self._loop(nursery)
            finally:
                self._stopping = True
                deadline = trio.current_time() + self.settings.shutdown_grace_seconds
                for scope in self._in_flight:
                    scope.deadline = min(scope.deadline, deadline)

    async def _loop(self, nursery: trio.Nursery) -> None:
        last_prune = -math.inf
        while True:
            self._wake = trio.Event()
            free = self.concurrency - len(self._in_flight) if not self._draining else 0
            claimed: list[DeliveryRecord] = []
            if free > 0:
                try:
                    claimed = await store.claim(
                        self.db, self.owner, limit=free, lease_seconds=self.settings.webhook_lease_seconds
                    )
                except Exception:
                    log.exception("claiming webhook deliveries failed")
            for delivery in claimed:
                scope = trio.CancelScope(shield=True)
                self._in_flight.add(scope)
                nursery.start_soon(self._deliver, delivery, scope)
            if trio.current_time() - last_prune > PRUNE_INTERVAL:
                last_prune = trio.current_time()
                await self._prune()
            if free > 0 and len(claimed) == free:
                continue  # possibly more due; slots are full now, the next pass waits
            with trio.move_on_after(await self._sleep_time(free)):
                await self._wake.wait()

    async def _sleep_time(self, free: int) -> float:
        poll = self.settings.webhook_poll_interval
        if free <= 0:
            return poll  # a finishing attempt wakes us
        try:
            due = await store.next_due(self.db)
        except Exception:
            log.exception("reading the webhook queue failed")
            return poll
        if due is None:
            return poll
        seconds = (parse_iso(due) - utc_now()).total_seconds()
        return max(MIN_SLEEP, min(poll, seconds))

    async def _prune(self) -> None:
        try:
            removed = await store.prune(self.db, to_iso(utc_now() - RETENTION))
            if removed:
                log.debug("pruned %d old webhook attempts", removed)
        except Exception:
            log.exception("pruning webhook attempts failed")

    async def _deliver(self, delivery: DeliveryRecord, scope: trio.CancelScope) -> None:
        outcome: Outcome | None = None
        attempted_at = utc_now_iso()
        failed = False
        with scope:
            try:
                if not self._stopping:  # claimed just before shutdown: give it back unsent
                    outcome = await self._attempt(delivery)
            except Exception:
                failed = True
                self.outcomes["error"] += 1
                log.exception("webhook delivery %s failed unexpectedly", delivery.id)
        self._in_flight.discard(scope)
        with trio.CancelScope(shield=True):
            try:
                if outcome is None or failed or scope.cancelled_caught:
                    await store.release(self.db, delivery.id, self.owner)
                else:
                    following = await store.complete(
                        self.db, delivery, self.owner, outcome, attempted_at=attempted_at, delay_for=self.delay_for
                    )
                    self.attempts += 1
                    self.outcomes["delivered" if outcome.delivered else "failed"] += 1
                    log.info(
                        "webhook %s delivery %s attempt %s: %s%s",
                        delivery.webhook_id,
                        delivery.id,
                        delivery.attempt,
                        "delivered" if outcome.delivered else f"failed ({outcome.error})",
                        f"; next attempt at {following.scheduled_at}" if following else "",
                    )
            except Exception:
                log.exception("recording webhook delivery %s failed; its lease will expire", delivery.id)
        self.wake()

    async def _attempt(self, delivery: DeliveryRecord) -> Outcome | None:
        """Send one claimed attempt; None when its webhook is gone (the row went with it)."""
        webhook = await store.load_webhook(self.db, delivery.webhook_id)
        if webhook is None:
            return None
        return await send_attempt(
            self.sender,
            self.secrets,
            webhook,
            delivery_id=delivery.id,
            event_id=delivery.event_id,
            event_type=delivery.event_type,
            payload=delivery.payload,
        )
