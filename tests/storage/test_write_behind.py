"""Writes behind the answer (`corral.storage.write_behind`), on each backend."""

from __future__ import annotations

import trio

from corral.storage import Database, Event, EventLog, utc_now_iso

INSERT = "INSERT INTO events (id, tenant_id, resource_type, resource_id, type, data, created_at) VALUES (?, NULL, 'sandbox', 's1', ?, '{}', ?)"


async def count(db: Database) -> int:
    return int(await db.fetch_value("SELECT COUNT(*) AS n FROM events"))


async def test_without_a_writer_statements_are_written_at_once(db: Database) -> None:
    await db.later.add(INSERT, ("e1", "direct", utc_now_iso()))
    assert await count(db) == 1


async def test_queued_statements_land_together_and_readers_flush_first(db: Database) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(db.later.run)
        for i in range(50):
            await db.later.add(INSERT, (f"e{i:03}", "queued", utc_now_iso()))
        assert db.later.pending == 50  # the caller waited for none of them
        log = EventLog(db)
        assert len(await log.list("sandbox", "s1")) == 50  # a reader on this node sees them all
        await db.later.add(INSERT, ("e999", "late", utc_now_iso()))
        with trio.fail_after(5):
            while await count(db) < 51:  # and the writer commits on its own within milliseconds
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()


async def test_stopping_the_writer_commits_what_is_left(db: Database) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(db.later.run)
        await EventLog(db).append(Event("queued", "sandbox", "s1", {}))
        nursery.cancel_scope.cancel()
    assert await count(db) == 1 and not db.later.running
    await db.later.add(INSERT, ("after", "direct", utc_now_iso()))  # after the stop: written directly again
    assert await count(db) == 2


async def test_a_bad_statement_loses_none_of_the_others(db: Database) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(db.later.run)
        await db.later.add(INSERT, ("a", "good", utc_now_iso()))
        await db.later.add(INSERT, ("a", "duplicate id", utc_now_iso()))
        await db.later.add(INSERT, ("b", "good", utc_now_iso()))
        await db.later.flush()
        nursery.cancel_scope.cancel()
    assert [row["id"] for row in await db.fetch_all("SELECT id FROM events ORDER BY id")] == ["a", "b"]
