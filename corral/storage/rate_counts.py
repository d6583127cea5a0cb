"""Rate-limit counts shared by the nodes of one store (issue 30).

Every node counts the requests it lets through in memory (`corral.http.ratelimit`)
and, every ~200 ms, adds those counts to the `rate_counts` table in one transaction:
one batched upsert that answers each bucket's global total at once, the node's mark
in `rate_count_nodes`, and the buckets of the window that reached half their limit
on any node ("hot": a node learns of them before it serves them). A request never
waits on this: the totals only bound what a node lets through until its next batch.

Rows of ended windows are deleted by the first batch of a new window. Only a
PostgreSQL store (several nodes) uses this; the SQL also runs on SQLite, for tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .database import Database, Row, Transaction

NODE_SECONDS = 2.0
"""A node whose last batch is older than this no longer takes a share of a window."""
KEEP_WINDOWS = 1
"""Ended windows kept besides the current one (a late batch of the last still lands)."""

Key = tuple[str, int]
"""(bucket, window start in Unix seconds)."""

_UPSERT_PG = (
    "INSERT INTO rate_counts (bucket, window_start, hits, limit_rpm)"
    " SELECT * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::bigint[]) ORDER BY 1, 2"
    " ON CONFLICT (bucket, window_start) DO UPDATE"
    " SET hits = rate_counts.hits + excluded.hits, limit_rpm = excluded.limit_rpm"
    " RETURNING bucket, window_start, hits"
)
_UPSERT_ONE = (
    "INSERT INTO rate_counts (bucket, window_start, hits, limit_rpm) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (bucket, window_start) DO UPDATE"
    " SET hits = rate_counts.hits + excluded.hits, limit_rpm = excluded.limit_rpm"
    " RETURNING bucket, window_start, hits"
)


@dataclass(frozen=True)
class RateTotals:
    """What one batch learned of the whole cluster."""

    totals: dict[Key, int]
    """The global hits of each bucket the batch added to, this batch included."""
    hot: dict[Key, int]
    """The global hits of the window's buckets at half their limit or more."""
    nodes: int
    """The nodes that added a batch within `NODE_SECONDS` (this one included)."""


class SharedRateCounts:
    """The `rate_counts` table, written by every node of the store in batches."""

    def __init__(self, db: Database, node: str) -> None:
        self._db = db
        self._node = node
        self._pruned_window = -1

    async def add(self, counts: Mapping[Key, tuple[int, int]], window: int, now: float) -> RateTotals:
        """Add `counts` (key -> (hits, limit)) and answer the totals, in one transaction.

        `window` is the current window's start: the hot buckets are of that window, and
        the first batch of a window deletes the rows of those before it."""
        prune = window if window != self._pruned_window else None
        totals = await self._db.transaction(lambda tx: self._add(tx, counts, window, now, prune))
        self._pruned_window = window
        return totals

    def _add(self, tx: Transaction, counts: Mapping[Key, tuple[int, int]], window: int, now: float, prune: int | None) -> RateTotals:
        rows = _upsert(tx, counts)
        now_ms = int(now * 1000)
        tx.execute(
            "INSERT INTO rate_count_nodes (node, seen_ms) VALUES (?, ?) ON CONFLICT (node) DO UPDATE SET seen_ms = excluded.seen_ms",
            (self._node, now_ms),
        )
        nodes = int(tx.fetch_value("SELECT count(*) FROM rate_count_nodes WHERE seen_ms > ?", (now_ms - int(NODE_SECONDS * 1000),)))
        hot = tx.fetch_all("SELECT bucket, hits FROM rate_counts WHERE window_start = ? AND hits * 2 >= limit_rpm", (window,))
        if prune is not None:
            tx.execute("DELETE FROM rate_counts WHERE window_start < ?", (prune - 60 * KEEP_WINDOWS,))
            tx.execute("DELETE FROM rate_count_nodes WHERE seen_ms < ?", (now_ms - 3600_000,))
        return RateTotals(
            totals={(row["bucket"], int(row["window_start"])): int(row["hits"]) for row in rows},
            hot={(row["bucket"], window): int(row["hits"]) for row in hot},
            nodes=max(1, nodes),
        )


def _upsert(tx: Transaction, counts: Mapping[Key, tuple[int, int]]) -> list[Row]:
    """One statement on PostgreSQL (arrays, in key order: two nodes' batches lock rows in
    the same order, so they never deadlock); a statement a row elsewhere."""
    keys = sorted(counts)
    if not keys:
        return []
    if tx.dialect == "postgresql":
        columns = (
            [bucket for bucket, _ in keys],
            [window for _, window in keys],
            [counts[key][0] for key in keys],
            [counts[key][1] for key in keys],
        )
        return list(tx.fetch_all(_UPSERT_PG, columns))
    return [row for key in keys for row in tx.fetch_all(_UPSERT_ONE, (*key, *counts[key]))]
