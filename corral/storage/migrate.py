"""Apply the numbered SQL files of `corral/storage/migrations` once each, in order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from corral.storage.clock import utc_now_iso
from corral.storage.database import Database, Transaction

_FILENAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_ADVISORY_LOCK_ID = 7_426_611_001  # any constant: serialises migrations across nodes

BLOB_TYPES = {"sqlite": "BLOB", "postgresql": "BYTEA"}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self, dialect: str) -> list[str]:
        """The file's statements; whole-line `--` comments are dropped first, so that
        prose in them may contain semicolons."""
        lines = [line for line in self.sql.splitlines() if not line.lstrip().startswith("--")]
        text = "\n".join(lines).replace("{blob}", BLOB_TYPES[dialect])
        return [s.strip() for s in text.split(";") if s.strip()]


def load_migrations() -> list[Migration]:
    found = []
    for entry in resources.files("corral.storage.migrations").iterdir():
        match = _FILENAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


def _apply(tx: Transaction, migrations: list[Migration]) -> list[int]:
    if tx.dialect == "postgresql":
        tx.execute("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_LOCK_ID,))
    tx.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    applied = {row["version"] for row in tx.fetch_all("SELECT version FROM schema_migrations")}
    done = []
    for migration in migrations:
        if migration.version in applied:
            continue
        for statement in migration.statements(tx.dialect):
            tx.execute(statement)
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, utc_now_iso()),
        )
        done.append(migration.version)
    return done


async def migrate(db: Database) -> list[int]:
    """Bring the schema up to date in one transaction; returns the versions applied."""
    migrations = load_migrations()
    return await db.transaction(lambda tx: _apply(tx, migrations))
