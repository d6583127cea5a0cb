"""SSE tickets: single-use, short-lived credentials for browser EventSource streams.

Only the digest is stored. Consumption is one conditional UPDATE, so a ticket is
used at most once even when two nodes race for it. A ticket has a purpose: `sse`
(POST /auth/sse-ticket) opens any stream its minting credential could read; a
narrower one (`cua:<session id>`) opens only the streams whose route names it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from corral.ids import random_token
from corral.storage import Database, iso_in, utc_now_iso

from . import store
from .store import TicketRecord

TICKET_PREFIX = "sset_"


@dataclass(frozen=True)
class TicketGrant:
    """What a used ticket lets its holder do: what the minting credential could."""

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
    record = TicketRecord(
        digest=_digest(ticket),
        tenant_id=tenant_id,
        user_id=user_id,
        api_key_id=api_key_id,
        scopes=None if scopes is None else sorted(scopes),
        purpose=purpose,
        expires_at=iso_in(ttl_seconds),
        used_at=None,
    )
    await store.tickets.create(db, record)
    return ticket


async def consume_ticket(db: Database, ticket: str, purposes: tuple[str, ...] = ("sse",)) -> TicketGrant | None:
    """The grant of an unused, unexpired ticket minted for one of `purposes`, marking
    it used; None otherwise (a ticket of another purpose is left unused)."""
    digest = _digest(ticket)
    if not await store.tickets.use(db, digest, utc_now_iso(), purposes):
        return None
    record = await store.tickets.load(db, digest)
    if record is None:
        return None
    return TicketGrant(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        api_key_id=record.api_key_id,
        scopes=None if record.scopes is None else frozenset(record.scopes),
        purpose=record.purpose,
    )


async def prune_tickets(db: Database) -> int:
    """Delete the tickets that expired over an hour ago; how many."""
    return await store.tickets.prune(db, iso_in(-3600))
