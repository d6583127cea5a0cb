"""The operator outbox: every e-mail the platform sent or would send (contract §7)."""

from __future__ import annotations

from corral.ids import new_ulid
from corral.storage import Database, Row, utc_now_iso


async def queue_mail(db: Database, to: str, subject: str, body: str) -> str:
    mail_id = new_ulid()
    await db.execute(
        "INSERT INTO outbox (id, recipient, subject, body, created_at) VALUES (?, ?, ?, ?, ?)",
        (mail_id, to, subject, body, utc_now_iso()),
    )
    return mail_id


async def list_mail(db: Database, limit: int = 200) -> list[Row]:
    rows = await db.fetch_all("SELECT * FROM outbox ORDER BY id DESC LIMIT ?", (limit,))
    return [
        {"id": r["id"], "to": r["recipient"], "subject": r["subject"], "body": r["body"], "created_at": r["created_at"]}
        for r in rows
    ]
