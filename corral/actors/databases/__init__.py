"""Managed PostgreSQL databases (contract §13): each a real server of its own, a kind of
the instance base, behind a connection proxy that wakes it on connect."""

from .actor import DatabaseActor, database_not_found
from .background import allowed_pairs, check_once, start_background, update_access
from .logs import follow_log, recent_lines
from .metrics import database_metrics
from .node import DatabaseNode, parse_ports
from .replication import DEFERRED, keep_waiting_forever, promote_forever
from .service import (
    FILTERS,
    MoveTo,
    NewBranch,
    NewDatabase,
    NewReplica,
    ResizeRequest,
    RestoreRequest,
    add_replica,
    backup,
    backup_public,
    branch_database,
    create_database,
    credentials,
    database_public,
    delete,
    find_backup,
    find_database,
    list_backups,
    list_databases,
    list_restores,
    move,
    replicas,
    resize,
    restart,
    restore,
    restore_public,
    rotate,
    start,
    stop,
    wake,
)
from .store import BackupRecord, DatabaseRecord, RestoreRecord

ACTORS = (DatabaseActor,)

__all__ = [
    "ACTORS", "DEFERRED", "FILTERS", "BackupRecord", "DatabaseActor", "DatabaseNode", "DatabaseRecord", "MoveTo", "NewBranch",
    "NewDatabase", "NewReplica", "ResizeRequest", "RestoreRecord", "RestoreRequest", "add_replica", "allowed_pairs",
    "backup", "backup_public", "branch_database", "check_once", "create_database", "credentials", "database_metrics",
    "database_not_found", "database_public", "delete", "find_backup", "find_database", "follow_log", "keep_waiting_forever",
    "list_backups", "list_databases", "list_restores", "move", "parse_ports", "promote_forever", "recent_lines", "replicas",
    "resize", "restart", "restore",
    "restore_public", "rotate", "start", "start_background", "stop", "update_access", "wake",
]
