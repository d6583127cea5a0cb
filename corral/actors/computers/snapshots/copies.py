"""Snapshots that outlive their node, and reach any node (issue 30).

A snapshot's files are a directory on the node that took it (`corral.vm.snapshots`).
On a store several nodes share, its computer may later need them on another node: a
new computer made from it is placed wherever there is room, the computer may be
taken over by another node when its own is lost, and a restore runs wherever the
computer lives then. So once the files are copied, the snapshot is also packed into
one archive in the blob store and a copy of that archive is handed to one other live
node (`ClusterBlobs.copy_elsewhere`) before the snapshot reads `ready`; its row keeps
the archive's digest (`archive_sha256`). A node that lacks the files fetches the
archive from whichever live node holds it and unpacks it (`here`). When the snapshot
goes, so does its archive, on every live node (`forget`).

On one node (SQLite) nothing is packed: the directory is all there is, as before.
"""

from __future__ import annotations

import logging
from pathlib import Path

from corral.actors.nodes.archives import forget_archive, keep_on_two_nodes
from corral.errors import ApiError
from corral.storage import BlobStore
from corral.vm import RuntimeDriver

from .store import SnapshotRecord

log = logging.getLogger("corral.computers.snapshots")

async def keep_elsewhere(blobs: BlobStore, driver: RuntimeDriver, data_dir: Path, snapshot_id: str) -> str | None:
    """Pack the snapshot into the blob store and have another live node hold a copy;
    the archive's digest (None on a one-node store)."""
    return await keep_on_two_nodes(blobs, data_dir, f"snapshot {snapshot_id}", lambda path: driver.export_snapshot(snapshot_id, path))


async def here(blobs: BlobStore, driver: RuntimeDriver, record: SnapshotRecord) -> None:
    """Make sure the snapshot's files are on this node: fetched as its archive from a
    node that holds it when they are not. A snapshot whose files no live node has (its
    node is lost or down, and it had no copy) is `503 SERVICE_UNAVAILABLE`, with why:
    they come back with the node."""
    if driver.has_snapshot(record.id):
        return
    if not record.archive_sha256:
        raise _unavailable(f"snapshot {record.id}'s files are only on the node that took it, and not on this one")
    try:
        archive = await blobs.verified_path(record.archive_sha256)
    except Exception as exc:
        raise _unavailable(f"snapshot {record.id}'s files are on no live node now ({exc})") from exc
    await driver.import_snapshot(record.id, archive)


def _unavailable(message: str) -> ApiError:
    return ApiError(503, "SERVICE_UNAVAILABLE", message)


async def forget(blobs: BlobStore, archive_sha256: str | None) -> None:
    """A snapshot's archive, on every live node (a deleted snapshot leaves nothing)."""
    if archive_sha256:
        await forget_archive(blobs, archive_sha256)
