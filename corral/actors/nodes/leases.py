"""Cluster-wide leases: work that must run on exactly one node at a time (issue 30).

Some background work is the cluster's, not a node's: taking over a lost node's
resources (`lost.py`), deleting egress audit rows past their retention. Run on every
node, it would double up; run on one fixed node, it would stop with that node. So each
such job holds a lease, a row of the `leases` table: its holder (a node name) and an
expiry, renewed every `RENEW_SECONDS` by the holder while it runs. Any node takes a
lease that is free or expired, and a node that takes new work takes a lease from a
draining one (a drained node is on its way out: what the jobs make, a computer brought
back from a lost node, goes to nodes that stay). A node that dies stops renewing, and its leases expire
`LEASE_SECONDS` (the time after which its heartbeat makes it `lost`) after its last
renewal; and a lease whose holder is seen lost (its heartbeat stale, or it stopped) is
free at once, so its jobs move when the node is seen lost, whichever comes first. A
node that stops cleanly gives its leases back at once (`release`).

Why a table and not `pg_try_advisory_lock`: an advisory lock lives as long as its
connection, and a node that hangs with its connection open (or a half-open TCP
connection after a network cut) keeps it for as long as TCP keep-alive takes; a lease
row expires on the same clock as the heartbeat, and works the same on SQLite. Taking
and renewing is one upsert whose `WHERE` admits only the holder or an expired lease,
so two nodes that try at once serialise on the row and one wins.

The holder stops believing it holds a lease `SAFETY_SECONDS` before the expiry it
wrote, counted on its monotonic clock from before the renewal was sent, so a node cut
off from the store stops its leased jobs before another node can take them on expiry
(clocks in step, as heartbeats already assume). A node whose heartbeat alone stalls
(its leases still renewed) may be taken over while it still runs a round: so leased
jobs are written to be safe if two rounds overlap (`run_leased`), and the lease keeps
them from running everywhere all the time, not from ever overlapping.

On a store that only one node may use (SQLite) every lease is this node's: nothing is
read or written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import trio

from corral.storage import Database, Transaction, to_iso, utc_now

from .store import DRAINING, LOST_AFTER_SECONDS

log = logging.getLogger("corral.nodes.leases")

LEASE_SECONDS = LOST_AFTER_SECONDS
"""How long a renewal holds a lease: a dead holder's jobs move when it is seen lost."""
RENEW_SECONDS = 1.0
"""How often leases are taken or renewed (a free lease waits at most this for a holder)."""
SAFETY_SECONDS = 1.0
"""The holder lets go this long before the expiry it wrote."""


def _take(tx: Transaction, names: list[str], holder: str, now: str, expires_at: str, lost_since: str) -> set[str]:
    """Take or renew each lease of `names` that is free, expired, held by a node seen
    lost, `holder`'s, or (`holder` not draining) held by a draining node; returns those
    `holder` holds afterwards."""
    held = set()
    for name in names:
        tx.execute(
            "INSERT INTO leases (name, holder, expires_at, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,"
            " updated_at = excluded.updated_at WHERE leases.holder = excluded.holder OR leases.expires_at < ?"
            " OR leases.holder IN (SELECT nodes.name FROM nodes WHERE nodes.heartbeat_at < ? OR nodes.boot_id = '')"
            " OR (leases.holder IN (SELECT nodes.name FROM nodes WHERE nodes.state = ?)"
            "     AND excluded.holder NOT IN (SELECT nodes.name FROM nodes WHERE nodes.state = ?))",
            (name, holder, expires_at, now, now, lost_since, DRAINING, DRAINING),
        )
        if tx.fetch_value("SELECT holder FROM leases WHERE name = ?", (name,)) == holder:
            held.add(name)
    return held


class Leases:
    """The cluster-wide leases this node wants, and which it holds now."""

    def __init__(self, db: Database, node_name: str, *, shared: bool) -> None:
        self.db = db
        self.node_name = node_name
        self.shared = shared
        """Several nodes may use the store (PostgreSQL); else every lease is this node's."""
        self._wanted: list[str] = []
        self._deadlines: dict[str, float] = {}
        """Lease name -> monotonic time until which this node holds it."""
        self._changed = trio.Event()

    def want(self, name: str) -> None:
        """Take `name` whenever it is free, from the next renewal on."""
        if name not in self._wanted:
            self._wanted.append(name)

    def holds(self, name: str) -> bool:
        if not self.shared:
            return True
        return self._deadlines.get(name, 0.0) > time.monotonic()

    def held(self) -> list[str]:
        return [name for name in self._wanted if self.holds(name)]

    async def renew(self) -> None:
        """One round: take or renew every wanted lease (a failure is logged: the leases
        run out on their own)."""
        if not self.shared or not self._wanted:
            return
        sent = time.monotonic()
        now = utc_now()
        try:
            held = await self.db.transaction(
                lambda tx: _take(
                    tx, list(self._wanted), self.node_name, to_iso(now), to_iso(now + timedelta(seconds=LEASE_SECONDS)),
                    to_iso(now - timedelta(seconds=LOST_AFTER_SECONDS)),
                )
            )
        except Exception:
            log.warning("the cluster leases could not be renewed", exc_info=True)
            return
        before = set(self.held())
        for name in self._wanted:
            if name in held:
                self._deadlines[name] = sent + LEASE_SECONDS - SAFETY_SECONDS
            else:
                self._deadlines.pop(name, None)
        after = set(self.held())
        for name in sorted(after - before):
            log.info("this node holds the cluster lease %r now", name)
        for name in sorted(before - after):
            log.info("this node no longer holds the cluster lease %r", name)
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Renew every `RENEW_SECONDS` until cancelled (the first round before started)."""
        await self.renew()
        task_status.started()
        while True:
            await trio.sleep(RENEW_SECONDS)
            await self.renew()

    async def until_held(self, name: str) -> None:
        while not self.holds(name):
            with trio.move_on_after(RENEW_SECONDS):
                await self.changed()

    async def changed(self) -> None:
        """Until the next renewal round ends."""
        await self._changed.wait()

    async def release(self) -> None:
        """Give back every lease this node holds (a clean stop): the others take them at
        once, and this node takes none again."""
        self._wanted.clear()
        self._deadlines.clear()
        if not self.shared:
            return
        try:
            await self.db.execute("DELETE FROM leases WHERE holder = ?", (self.node_name,))
        except Exception:
            log.warning("the cluster leases could not be given back: they run out in %s s", LEASE_SECONDS, exc_info=True)


async def run_leased(
    leases: Leases,
    name: str,
    job: Callable[[], Awaitable[Any]],
    interval: Callable[[], float],
    what: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run `job` every `interval()` seconds while this node holds lease `name`: at once
    when it takes the lease (the last holder may have died just before its round), then
    every interval. A round under way when the lease is lost finishes: leased jobs are
    written to be safe if run twice (a delete of old rows, a takeover that compares and
    sets), the lease only keeps them from running everywhere all the time."""
    leases.want(name)
    task_status.started()
    while True:
        await leases.until_held(name)
        try:
            await job()
        except Exception:
            log.exception("%s failed; trying again in %s s", what, interval())
        deadline = trio.current_time() + interval()
        while trio.current_time() < deadline and leases.holds(name):
            with trio.move_on_at(deadline):
                await leases.changed()
