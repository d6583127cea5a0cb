"""SSE tickets: single-use, short-lived credentials for browser EventSource streams.

Only the digest is stored. Consumption is one conditional UPDATE, so a ticket is
used at most once even when two nodes race for it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from corral.ids import random_token
from corral.storage import Database, iso_in, utc_now_iso

TICKET_PREFIX = "sset_"


@dataclass(frozen=True)
class TicketGrant:
    tenant_id: str
    user_id: str | None
    api_key_id: str | None
    scopes: frozenset[str] | None
    purpose: str


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


async def mint_ticket(
    db: Database,
    *,
    tenant_id: str,
    user_id: str | None,
    api_key_id: str | None,
    scopes: frozenset[str] | None,
    ttl_seconds: int,
    purpose: str = "sse",
) -> str:
    ticket = TICKET_PREFIX + random_token(24)
    await db.execute(
        "INSERT INTO sse_tickets (digest, tenant_id, user_id, api_key_id, scopes, purpose, expires_at, used_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
        (
            _digest(ticket),
            tenant_id,
            user_id,
            api_key_id,
            json.dumps(None if scopes is None else sorted(scopes)),
            purpose,
            iso_in(ttl_seconds),
        ),
    )
    return ticket


async def consume_ticket(db: Database, ticket: str) -> TicketGrant | None:
    """The grant of an unused, unexpired ticket, marking it used; None otherwise."""
    digest = _digest(ticket)
    now = utc_now_iso()
    changed = await db.execute(
        "UPDATE sse_tickets SET used_at = ? WHERE digest = ? AND used_at IS NULL AND expires_at > ?",
        (now, digest, now),
    )
    if changed != 1:
        return None
    row = await db.fetch_one("SELECT * FROM sse_tickets WHERE digest = ?", (digest,))
    if row is None:
        return None
    scopes = json.loads(row["scopes"])
    return TicketGrant(
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        api_key_id=row["api_key_id"],
        scopes=None if scopes is None else frozenset(scopes),
        purpose=row["purpose"],
    )


async def prune_tickets(db: Database) -> int:
    return await db.execute("DELETE FROM sse_tickets WHERE expires_at < ?", (iso_in(-3600),))
