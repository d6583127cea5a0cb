"""Managed PostgreSQL servers as a runtime (`PostgresDriver`): see `driver.py`."""

from .driver import BackupFailed, PostgresDriver
from .layout import ENGINE_VERSION, PG_BIN, Layout, traversable

__all__ = ["ENGINE_VERSION", "PG_BIN", "BackupFailed", "Layout", "PostgresDriver", "traversable"]
