"""Managed PostgreSQL servers as a runtime (`PostgresDriver`): see `driver.py`."""

from .driver import BackupFailed, PostgresDriver
from .files import replica_name
from .layout import ENGINE_VERSION, PG_BIN, Layout, traversable

__all__ = ["ENGINE_VERSION", "PG_BIN", "BackupFailed", "Layout", "PostgresDriver", "replica_name", "traversable"]
