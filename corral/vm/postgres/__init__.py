"""Managed PostgreSQL servers as a runtime (`PostgresDriver`): see `driver.py`."""

from .driver import BackupFailed, PostgresDriver
from .files import replica_name
from .layout import ENGINE_VERSION, PG_BIN, Layout, traversable
from .server_log import KEEP_BYTES as LOG_KEEP_BYTES
from .server_log import tail_bytes as log_tail_bytes

__all__ = [
    "ENGINE_VERSION", "LOG_KEEP_BYTES", "PG_BIN", "BackupFailed", "Layout", "PostgresDriver", "log_tail_bytes", "replica_name",
    "traversable",
]
