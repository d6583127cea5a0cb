"""Claims: room held on a node for a resource being created there (issue 30).

Placement (`placement.py`) checks a node's room and writes a claim in one transaction,
so two nodes placing at once never both take the last room. The claim counts against
its node until the resource's row exists: the create path names the resource's id in
the claim (`bind`) before its actor writes the row, and placement counts a claim only
while no row of that id exists, reading both in one statement (one snapshot), so each
resource counts exactly once, as a claim or as a row, never both and never neither.
The node that serves the create deletes the claim when the create ends, whatever its
outcome (`release`). A claim whose holder died mid-create stops counting at
`expires_at` (`CLAIM_SECONDS`) and is deleted by the next placement.

Which claim a create holds travels with the request, not the resource: the serving
node's front sets it (`holding`) and the create path, deeper in the same task, binds
it. On a one-node (SQLite) store nothing is placed, so nothing is held and `bind`
reads and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from corral.storage import Database, Transaction, to_iso, utc_now

CLAIM_SECONDS = 120.0
"""How long a claim counts at most: longer than any create takes."""
KINDS = ("sandboxes", "computers", "databases", "deployment_services", "sandbox_template_builds")
"""A claim's `kind`: the table its resource's row goes to."""

_held: ContextVar[str | None] = ContextVar("corral_placement_claim", default=None)


@contextmanager
def holding(claim_id: str) -> Iterator[None]:
    """While serving a placed create: the claim `bind` gives the resource's id."""
    token = _held.set(claim_id)
    try:
        yield
    finally:
        _held.reset(token)


async def bind(db: Database, resource_id: str) -> None:
    """The create's resource will have this id (call it before its row is written):
    from the moment the row exists, it counts instead of the claim."""
    claim_id = _held.get()
    if claim_id is not None:
        await db.execute("UPDATE node_claims SET resource_id = ? WHERE id = ?", (resource_id, claim_id))


async def release(db: Database, claim_id: str) -> None:
    await db.execute("DELETE FROM node_claims WHERE id = ?", (claim_id,))


def insert(tx: Transaction, claim_id: str, node: str, kind: str, memory_mb: int) -> None:
    expires_at = to_iso(utc_now() + timedelta(seconds=CLAIM_SECONDS))
    tx.execute(
        "INSERT INTO node_claims (id, node, kind, memory_mb, expires_at) VALUES (?, ?, ?, ?, ?)",
        (claim_id, node, kind, memory_mb, expires_at),
    )


def forget_expired(tx: Transaction) -> None:
    tx.execute("DELETE FROM node_claims WHERE expires_at < ?", (to_iso(utc_now()),))


def unresolved_sql() -> str:
    """The claims still counting, as a query of `(node, memory_mb)`: not expired (the
    caller deleted those), and no row yet of the resource they were bound to."""
    rows_exist = " OR ".join(
        f"(c.kind = '{table}' AND EXISTS (SELECT 1 FROM {table} r WHERE r.id = c.resource_id))" for table in KINDS
    )
    return f"SELECT c.node, c.memory_mb FROM node_claims c WHERE c.resource_id IS NULL OR NOT ({rows_exist})"
