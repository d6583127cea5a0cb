"""Snapshots of a computer's files (contract §10): the rows, the messages, and the
handlers the computer's actor has for them.

Modules: `store` (the `computer_snapshots` table as frozen records), `messages`,
`handlers` (`SnapshotHandlers`, a part of the computer's actor), `sources` (a
snapshot to create a computer from), `errors` and `public` (the API's answers and
record). The operations the HTTP layer calls are
`corral.actors.computers.snapshot_service`'s.
"""

from __future__ import annotations

from . import store
from .errors import already_deleted, snapshot_not_found, snapshot_not_ready
from .handlers import SnapshotHandlers
from .messages import DeleteSnapshot, RestoreSnapshot, SnapshotTaken, TakeSnapshot
from .public import snapshot_public
from .sources import source_snapshot, still_ready
from .store import SnapshotRecord

__all__ = [
    "DeleteSnapshot",
    "RestoreSnapshot",
    "SnapshotHandlers",
    "SnapshotRecord",
    "SnapshotTaken",
    "TakeSnapshot",
    "already_deleted",
    "snapshot_not_found",
    "snapshot_not_ready",
    "snapshot_public",
    "source_snapshot",
    "still_ready",
    "store",
]
