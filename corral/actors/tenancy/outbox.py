"""The operator outbox: every e-mail the platform sent or would send (contract §7)."""

from __future__ import annotations

from typing import Any

from corral.ids import new_ulid
from corral.storage import Database, utc_now_iso

from . import store
from .store import MailRecord


async def queue_mail(db: Database, to: str, subject: str, body: str) -> str:
    """Put the message in the outbox; its id."""
    mail = MailRecord(id=new_ulid(), recipient=to, subject=subject, body=body, created_at=utc_now_iso())
    await store.outbox.insert(db, mail)
    return mail.id


def mail_public(mail: MailRecord) -> dict[str, Any]:
    return {"id": mail.id, "to": mail.recipient, "subject": mail.subject, "body": mail.body, "created_at": mail.created_at}


async def list_mail(db: Database, limit: int = 200) -> list[dict[str, Any]]:
    """The newest messages first, in their public shape."""
    return [mail_public(mail) for mail in await store.outbox.newest(db, limit)]
