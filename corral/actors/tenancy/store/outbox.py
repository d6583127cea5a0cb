"""The `outbox` table: every e-mail the platform sent or would send (contract §7).

`insert` is the tenancy package's own (`tenancy.outbox`); reads are for anyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database


@dataclass(frozen=True, slots=True)
class MailRecord:
    """One e-mail message."""

    id: str
    recipient: str
    subject: str
    body: str
    created_at: str


OUTBOX = RowStore("outbox", MailRecord)


async def insert(db: Database, record: MailRecord) -> None:
    await db.transaction(lambda tx: OUTBOX.insert(tx, record))


async def newest(db: Database, limit: int) -> list[MailRecord]:
    return OUTBOX.records(await db.fetch_all("SELECT * FROM outbox ORDER BY id DESC LIMIT ?", (limit,)))
