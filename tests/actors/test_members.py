"""Workspace owners under concurrency, on SQLite and PostgreSQL: two owners demoting each
other at the same moment must leave one owner (LAST_OWNER for the second)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from corral.actors import tenancy
from corral.actors.tenancy import members
from corral.errors import ApiError
from corral.storage import Database


@contextmanager
def other_transaction(db: Database) -> Iterator[Any]:
    """A second connection with an open write transaction, as another request would hold."""
    if db.dialect == "sqlite":
        conn: Any = sqlite3.connect(db.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        conn = psycopg.connect(db.url)
    try:
        yield conn
    finally:
        conn.close()


async def test_concurrent_demotions_keep_an_owner(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Race", "race-owner@example.test", "password123")
    second = await tenancy.create_user(db, "race-second@example.test", "password123", None, created.tenant.id, "member")
    workspace, first_id = created.workspace, created.owner.id
    await members.change_role(db, workspace, second.id, "owner", actor_role="owner")

    outcome: list[str] = []

    async def demote_first() -> None:
        try:
            await members.change_role(db, workspace, first_id, "admin", actor_role="owner")
            outcome.append("demoted")
        except ApiError as error:
            outcome.append(error.code)

    mark = "?" if db.dialect == "sqlite" else "%s"
    with other_transaction(db) as conn:
        # The other request demotes the second owner, taking the same workspace lock first.
        conn.execute(f"UPDATE workspaces SET updated_at = updated_at WHERE id = {mark}", (workspace.id,))
        conn.execute(
            f"UPDATE workspace_members SET role = 'admin' WHERE workspace_id = {mark} AND user_id = {mark}",
            (workspace.id, second.id),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(demote_first)
            await trio.sleep(0.3)
            assert outcome == []  # waiting for the other request's transaction
            conn.execute("COMMIT") if db.dialect == "sqlite" else conn.commit()

    assert outcome == ["LAST_OWNER"]
    roles = {m.user_id: m.role for m in await members.list_members(db, workspace.id)}
    assert roles == {first_id: "owner", second.id: "admin"}
