"""The `sse_tickets` table: single-use tickets, keyed by their digest.

Every query is the tenancy package's own (`tenancy.tickets`): a ticket is minted,
used once, and pruned after it expired.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from corral.actors.record import RowStore
from corral.storage import Database


@dataclass(frozen=True, slots=True)
class TicketRecord:
    """One ticket; `scopes` None means the minting credential was unrestricted."""

    digest: str
    tenant_id: str
    user_id: str | None
    api_key_id: str | None
    scopes: list[str] | None = field(hash=False)
    purpose: str
    expires_at: str
    used_at: str | None


TICKETS = RowStore("sse_tickets", TicketRecord, id_column="digest", json_columns=("scopes",))


async def create(db: Database, record: TicketRecord) -> None:
    # `scopes` is NOT NULL: unrestricted is stored as JSON null, which the store's
    # encoding (None stays NULL) would not write.
    row = {**TICKETS.row(dataclasses.asdict(record)), "scopes": json.dumps(record.scopes)}
    await db.transaction(lambda tx: tx.insert("sse_tickets", row))


async def use(db: Database, digest: str, now: str, purposes: tuple[str, ...] = ("sse",)) -> bool:
    """Mark the ticket used when it is unused, unexpired and for one of `purposes`;
    whether this call did (a ticket for another purpose stays unused)."""
    marks = ", ".join("?" for _ in purposes)
    changed = await db.execute(
        "UPDATE sse_tickets SET used_at = ? WHERE digest = ? AND used_at IS NULL AND expires_at > ?"
        f" AND purpose IN ({marks})",
        (now, digest, now, *purposes),
    )
    return changed == 1


async def load(db: Database, digest: str) -> TicketRecord | None:
    return await TICKETS.load(db, digest)


async def prune(db: Database, expired_before: str) -> int:
    """Delete the tickets that expired before `expired_before`; how many."""
    return await db.execute("DELETE FROM sse_tickets WHERE expires_at < ?", (expired_before,))
