"""Storage layer: the SQL store (SQLite or PostgreSQL), migrations, event log, secret encryption."""

from corral.storage.blobs import Blob, BlobCorrupted, BlobNotFound, BlobStore, LocalBlobStore
from corral.storage.clock import iso_in, parse_iso, to_iso, utc_now, utc_now_iso
from corral.storage.crypto import DecryptionError, SecretBox, associated_data, load_or_create_kek
from corral.storage.database import (
    Database,
    PostgresDatabase,
    Row,
    SqliteDatabase,
    Transaction,
    open_database,
    sql_identifier,
)
from corral.storage.event_log import Event, EventLog, new_event_id
from corral.storage.migrate import load_migrations, migrate
from corral.storage.notices import Notices
from corral.storage.rate_counts import RateTotals, SharedRateCounts
from corral.storage.remote_events import RemoteEvents
from corral.storage.write_behind import WriteBehind

__all__ = [
    "Blob",
    "BlobCorrupted",
    "BlobNotFound",
    "BlobStore",
    "Database",
    "DecryptionError",
    "Event",
    "EventLog",
    "LocalBlobStore",
    "Notices",
    "PostgresDatabase",
    "RateTotals",
    "RemoteEvents",
    "Row",
    "SecretBox",
    "SharedRateCounts",
    "SqliteDatabase",
    "Transaction",
    "WriteBehind",
    "associated_data",
    "iso_in",
    "load_migrations",
    "load_or_create_kek",
    "migrate",
    "new_event_id",
    "open_database",
    "parse_iso",
    "sql_identifier",
    "to_iso",
    "utc_now",
    "utc_now_iso",
]
