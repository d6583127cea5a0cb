"""Notices between the nodes of one store (`corral.storage.notices`), on a real
PostgreSQL: two stores on one database stand for two nodes; and on SQLite, where no
notice leaves the node."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from corral.storage import Database, Notices, migrate, open_database
from tests.pg_server import create_database

_names = itertools.count()


@pytest.fixture
async def two_stores(postgres_url: str) -> AsyncIterator[tuple[Database, Database]]:
    url = create_database(postgres_url, f"notices_{next(_names)}")
    a, b = open_database(url), open_database(url)
    await migrate(a)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def until(check: Callable[[], bool], seconds: float = 5) -> None:
    with trio.fail_after(seconds):
        while not check():
            await trio.sleep(0.002)


async def test_a_notice_reaches_the_other_node_once_and_its_own_handlers_at_once(two_stores: tuple[Database, Database]) -> None:
    a_db, b_db = two_stores
    a, b = Notices(a_db, "node-a"), Notices(b_db, "node-b")
    heard_a: list[str | None] = []
    heard_b: list[str | None] = []
    a.listen("share", heard_a.append)
    b.listen("share", heard_b.append)
    b.listen("other", lambda subject: heard_b.append(f"other:{subject}"))
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        await nursery.start(b.run)
        a.tell("share", "shr_1")
        assert heard_a == ["shr_1"]  # this node's handlers: before `tell` returns
        started = trio.current_time()
        await until(lambda: heard_b == ["shr_1"])
        assert trio.current_time() - started < 0.5
        a.tell_others("share", "shr_2")  # the maker already brought its own table up to date
        await until(lambda: heard_b == ["shr_1", "shr_2"])
        assert heard_a == ["shr_1"]
        await trio.sleep(0.2)
        assert heard_a == ["shr_1"] and heard_b == ["shr_1", "shr_2"]  # nobody hears its own notice back
        nursery.cancel_scope.cancel()


async def test_after_a_lost_connection_every_handler_reads_everything_again(two_stores: tuple[Database, Database]) -> None:
    a_db, b_db = two_stores
    a, b = Notices(a_db, "node-a"), Notices(b_db, "node-b", retry_seconds=(0.05,))
    heard: list[str | None] = []
    b.listen("share", heard.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        await nursery.start(b.run)
        killed = await a_db.fetch_value(
            "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = 'corral-notices' "
            "AND datname = current_database()"
        )
        assert killed
        await until(lambda: b.reconnects == 1 and None in heard)  # missed notices: None, "read everything"
        a.tell("share", "shr_after")
        await until(lambda: heard[-1] == "shr_after")
        nursery.cancel_scope.cancel()


async def test_on_sqlite_a_notice_only_calls_this_nodes_handlers(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        notices = Notices(db, "only")
        heard: list[str | None] = []
        notices.listen("share", heard.append)
        await notices.run()  # nothing to run: it returns
        notices.tell("share", "shr_1")
        notices.tell_others("share", "shr_2")
        assert heard == ["shr_1"] and notices.sent == 0
    finally:
        await db.close()
