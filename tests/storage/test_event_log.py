from datetime import timedelta

from corral.storage import Database, Event, EventLog, to_iso, utc_now


async def test_events_replay_in_order_after_an_id(db: Database) -> None:
    log = EventLog(db)
    appended = [await log.append(Event(f"e{i}", "sandbox", "s1", {"i": i})) for i in range(20)]
    await log.append(Event("other", "sandbox", "s2", {}))
    assert [e.id for e in appended] == sorted(e.id for e in appended)
    listed = await log.list("sandbox", "s1")
    assert [e.type for e in listed] == [f"e{i}" for i in range(20)]
    after = await log.list("sandbox", "s1", after=appended[14].id)
    assert [e.data["i"] for e in after] == [15, 16, 17, 18, 19]


async def test_retention_hides_and_prunes_old_events(db: Database) -> None:
    log = EventLog(db, retention_seconds=15 * 60)
    old = Event("old", "sandbox", "s1", {}, created_at=to_iso(utc_now() - timedelta(minutes=16)))
    await log.append(old)
    fresh = await log.append(Event("fresh", "sandbox", "s1", {}))
    assert [e.id for e in await log.list("sandbox", "s1")] == [fresh.id]
    assert await log.prune() == 1
    assert await db.fetch_value("SELECT COUNT(*) AS n FROM events") == 1
