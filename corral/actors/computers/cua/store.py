"""The `computer_cua_sessions` table: CUA session rows as `CuaSessionRecord`s.

Reads are for anyone in the package; rows are written by the session actor alone
(made from a draft record on its first activation, see `CuaSessionActor.create_record`).
A session belongs to its computer: the row goes with the computer's (ON DELETE CASCADE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.storage import Database


@dataclass(frozen=True, slots=True)
class CuaSessionRecord:
    """One CUA session (`metadata` decoded); `tenant_id` is the computer's."""

    id: str
    computer_id: str
    tenant_id: str
    status: str
    task: str | None
    metadata: dict[str, Any] = field(hash=False)
    action_count: int
    created_at: str
    ended_at: str | None


CUA_SESSIONS = RowStore("computer_cua_sessions", CuaSessionRecord, json_columns=("metadata",))


async def load(db: Database, session_id: str) -> CuaSessionRecord | None:
    return await CUA_SESSIONS.load(db, session_id)


async def find(db: Database, computer_id: str, session_id: str) -> CuaSessionRecord | None:
    """The session, only if it belongs to `computer_id`."""
    found = await CUA_SESSIONS.where(db, [("id", session_id), ("computer_id", computer_id)])
    return found[0] if found else None


async def of_computer(db: Database, computer_id: str) -> list[CuaSessionRecord]:
    """The computer's sessions, newest first."""
    return await CUA_SESSIONS.where(db, [("computer_id", computer_id)], order_by="created_at DESC, id DESC")
