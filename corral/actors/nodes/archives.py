"""Files of a node packed as one archive in the blob store, for other nodes (issue 30).

A computer's snapshot, a stopped instance that moves, and a tenant's template layer are
directories on the node that made them. To reach or outlive that node they travel as
one archive in the blob store (`export_to_blobs`): kept on a second live node ahead of
need (`keep_on_two_nodes`), fetched by a node that lacks them (`ClusterBlobs`), and
removed from every live node when nothing names them any more (`forget_archive`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from corral.storage import Blob, BlobStore

from .blobs import ClusterBlobs

log = logging.getLogger("corral.nodes.archives")

SCRATCH = "snapshot-archives"
"""Under the data directory: an archive while it is packed, before the blob store takes it."""

Writer = Callable[[Path], Awaitable[None]]
"""Writes the archive at the path it is given (a runtime driver's export)."""


async def export_to_blobs(blobs: BlobStore, data_dir: Path, write: Writer) -> Blob:
    """What `write` packs, as one archive in the blob store."""
    scratch = data_dir / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=scratch, suffix=".tar")
    os.close(handle)  # tar writes it
    path = Path(name)
    try:
        await write(path)
        return await blobs.put_file(path)
    finally:
        path.unlink(missing_ok=True)


async def keep_on_two_nodes(blobs: BlobStore, data_dir: Path, what: str, write: Writer) -> str | None:
    """Pack `what` into the blob store and have another live node hold a copy; the
    archive's digest (None on a one-node store, where nothing is packed). The copy
    failing (no other node is live) is logged, not raised: `what` is this node's
    alone until then, as on one node."""
    if not isinstance(blobs, ClusterBlobs):
        return None
    blob = await export_to_blobs(blobs, data_dir, write)
    holder = await blobs.copy_elsewhere(blob.sha256)
    if holder is None:
        log.warning("%s: no other node holds a copy yet (archive %s)", what, blob.sha256)
    else:
        log.info("%s: node %s holds a copy (archive %s, %d bytes)", what, holder, blob.sha256, blob.size_bytes)
    return blob.sha256


async def forget_archive(blobs: BlobStore, archive_sha256: str) -> None:
    """An archive no one needs any more, on every live node."""
    try:
        if isinstance(blobs, ClusterBlobs):
            await blobs.delete_everywhere(archive_sha256)
        else:
            await blobs.delete(archive_sha256)
    except Exception as exc:
        log.warning("the archive %s could not be removed everywhere: %s", archive_sha256, exc)
