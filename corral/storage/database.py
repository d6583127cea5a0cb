"""One SQL interface over SQLite (embedded default) and PostgreSQL (production).

SQL is written once with `?` placeholders; the PostgreSQL backend rewrites them.
Rows come back as plain dicts. Multi-statement work goes through `transaction`,
which runs a synchronous function on a worker thread with the connection held, so
the function sees one consistent snapshot and commits or rolls back as a whole.

SQLite reads run on the trio thread (about 5 us); writes and transactions go to a
worker thread, serialised by a capacity limiter of one, so the event loop never
waits on a lock. Every PostgreSQL call goes through a worker thread (psycopg 3's
async API does not run under trio).

With a tracer provider installed (only when spans are exported) each transaction is
a span `store.transaction` (`db.system`): the time on the worker thread and the wait
for it. Reads on the trio thread are not spanned (5 us each).
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio

from corral.tracer import recording_tracer

from .write_behind import WriteBehind

Row = dict[str, Any]
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")
Params = Sequence[Any]
T = TypeVar("T")


async def _run_traced(
    dialect: str, run: Callable[[Callable[[Transaction], T]], T], work: Callable[[Transaction], T], limiter: trio.CapacityLimiter
) -> T:
    """`run(work)` on a worker thread, in a span when traces are recorded."""
    tracer = recording_tracer(__name__)
    if tracer is None:
        return await trio.to_thread.run_sync(run, work, limiter=limiter)
    with tracer.start_as_current_span("store.transaction", attributes={"db.system": dialect}):
        return await trio.to_thread.run_sync(run, work, limiter=limiter)


class Transaction(ABC):
    """A connection inside an open transaction, used synchronously on a worker thread."""

    dialect: str

    @abstractmethod
    def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows it changed."""

    @abstractmethod
    def fetch_all(self, sql: str, params: Params = ()) -> list[Row]: ...

    def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        rows = self.fetch_all(sql, params)
        return rows[0] if rows else None

    def fetch_value(self, sql: str, params: Params = ()) -> Any:
        row = self.fetch_one(sql, params)
        return None if row is None else next(iter(row.values()))

    def insert(self, table: str, row: Row) -> None:
        """Insert `row` (column -> value) into `table`."""
        self.execute(insert_sql(table, row), tuple(row.values()))


def sql_identifier(name: str) -> str:
    """`name`, checked to be a plain identifier before it is interpolated into SQL."""
    if not _IDENTIFIER.match(name):
        raise ValueError(f"not an SQL identifier: {name!r}")
    return name


def insert_sql(table: str, row: Row) -> str:
    columns = ", ".join(sql_identifier(name) for name in row)
    return f"INSERT INTO {sql_identifier(table)} ({columns}) VALUES ({', '.join('?' for _ in row)})"


class Database(ABC):
    """The asynchronous face of the store, shared by every layer that may use it."""

    dialect: str
    url: str
    query_observer: Callable[[str, float], None] | None = None
    """Given `(operation, seconds)` for each transaction (`transaction`, worker thread
    and its wait included) and each read on the trio thread (`read`): the node's
    metrics. None (the default) measures nothing."""

    def pool_stats(self) -> PoolStats:
        """How many connections (or worker slots) the store has, uses and is waited for."""
        return PoolStats(0, 0, 0)

    @abstractmethod
    async def transaction(self, work: Callable[[Transaction], T]) -> T:
        """Run `work(tx)` on a worker thread inside one transaction and return its result."""

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self.transaction(lambda tx: tx.execute(sql, params))

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self.transaction(lambda tx: tx.fetch_all(sql, params))

    async def fetch_one(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self.fetch_all(sql, params)
        return rows[0] if rows else None

    async def fetch_value(self, sql: str, params: Params = ()) -> Any:
        row = await self.fetch_one(sql, params)
        return None if row is None else next(iter(row.values()))

    async def insert(self, table: str, row: Row) -> None:
        await self.execute(insert_sql(table, row), tuple(row.values()))

    def data_version(self) -> int | None:
        """A number that changes whenever another connection (another writer, another
        process, another node) committed to the store since the last call, read
        without leaving the event loop; None where that cannot be had cheaply (then
        nothing may be cached across requests)."""
        return None

    @functools.cached_property
    def later(self) -> WriteBehind:
        """Writes the caller does not wait for (`corral.storage.write_behind`): events,
        audit rows, activity times. Its writer runs in the node's nursery."""
        return WriteBehind(self)

    @abstractmethod
    async def close(self) -> None: ...


@dataclass(frozen=True)
class PoolStats:
    size: int
    in_use: int
    waiting: int


def _limiter_stats(limiter: trio.CapacityLimiter) -> PoolStats:
    stats = limiter.statistics()
    return PoolStats(int(limiter.total_tokens), stats.borrowed_tokens, stats.tasks_waiting)


async def _on_worker(
    db: Database, run: Callable[[Callable[[Transaction], T]], T], work: Callable[[Transaction], T], limiter: trio.CapacityLimiter
) -> T:
    """A transaction on a worker thread (both stores), timed for `db.query_observer`
    when there is one."""
    observer = db.query_observer
    if observer is None:
        return await _run_traced(db.dialect, run, work, limiter)
    started = time.perf_counter()
    try:
        return await _run_traced(db.dialect, run, work, limiter)
    finally:
        observer("transaction", time.perf_counter() - started)


# --- SQLite -------------------------------------------------------------------------


class _SqliteTransaction(Transaction):
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> int:
        return self._conn.execute(sql, tuple(params)).rowcount

    def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


class SqliteDatabase(Database):
    dialect = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._writer = _sqlite_connect(self.path)
        self._reader = _sqlite_connect(self.path) if self.path != ":memory:" else self._writer
        self._write_limiter = trio.CapacityLimiter(1)
        self._thread_lock = threading.Lock()

    def _run(self, work: Callable[[Transaction], T]) -> T:
        with self._thread_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                result = work(_SqliteTransaction(self._writer))
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
            return result

    async def transaction(self, work: Callable[[Transaction], T]) -> T:
        return await _on_worker(self, self._run, work, self._write_limiter)

    def pool_stats(self) -> PoolStats:
        """The one writer connection (reads take the reader on the trio thread)."""
        return _limiter_stats(self._write_limiter)

    def data_version(self) -> int | None:
        """SQLite's `PRAGMA data_version` of the reader: every commit of the writer
        connection, or of any other process on the file, changes it."""
        if self._reader is self._writer:
            return None
        return int(self._reader.execute("PRAGMA data_version").fetchone()[0])

    async def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        """Reads run on the trio thread against their own WAL reader connection."""
        if self._reader is self._writer:
            return await super().fetch_all(sql, params)
        observer = self.query_observer
        if observer is None:
            return _SqliteTransaction(self._reader).fetch_all(sql, params)
        started = time.perf_counter()
        try:
            return _SqliteTransaction(self._reader).fetch_all(sql, params)
        finally:
            observer("read", time.perf_counter() - started)

    async def close(self) -> None:
        if self._reader is not self._writer:
            self._reader.close()
        with self._thread_lock:
            self._writer.close()


# --- PostgreSQL ---------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\?")


@functools.lru_cache(maxsize=2048)
def to_pyformat(sql: str) -> str:
    """Rewrite `?` placeholders for psycopg, escaping literal percent signs first."""
    return _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))


class _PostgresTransaction(Transaction):
    dialect = "postgresql"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Params = ()) -> int:
        cursor = self._conn.execute(to_pyformat(sql), tuple(params))
        return int(cursor.rowcount)

    def fetch_all(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._conn.execute(to_pyformat(sql), tuple(params))
        if cursor.description is None:
            return []
        return [dict(row) for row in cursor.fetchall()]


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, url: str, *, min_size: int = 2, max_size: int = 10) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row, "autocommit": False},
            open=True,
        )
        self._limiter = trio.CapacityLimiter(max_size)

    def _run(self, work: Callable[[Transaction], T]) -> T:
        with self._pool.connection() as conn, conn.transaction():
            return work(_PostgresTransaction(conn))

    async def transaction(self, work: Callable[[Transaction], T]) -> T:
        return await _on_worker(self, self._run, work, self._limiter)

    def pool_stats(self) -> PoolStats:
        """The connection pool's slots (one worker thread each)."""
        return _limiter_stats(self._limiter)

    async def close(self) -> None:
        await trio.to_thread.run_sync(self._pool.close)


def open_database(url: str) -> Database:
    """Open the store named by a `sqlite:///path` or `postgresql://...` URL."""
    if url.startswith("sqlite:///"):
        # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
        return SqliteDatabase(url[len("sqlite:///") :])
    if url.startswith("sqlite://"):
        return SqliteDatabase(":memory:")
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    raise ValueError(f"unsupported database URL: {url.split(':', 1)[0]}:...")
