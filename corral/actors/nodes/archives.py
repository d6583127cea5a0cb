"""Files of a node packed as one archive in the blob store, for other nodes (issue 30).

A computer's snapshot, a stopped instance that moves, and a tenant's template layer are
directories on the node that made them. To reach or outlive that node they travel as
one archive in the blob store (`export_to_blobs`): kept on a second live node ahead of
need (`keep_on_two_nodes`), fetched by a node that lacks them (`ClusterBlobs`), and
removed from every live node when nothing names them any more (`forget_archive`).

Two copies stay two: the node holding the cluster lease `LEASE` looks every
`CHECK_SECONDS` for archives with fewer than two holders that are not lost (a holder
lost with its node, as `lost.lost_nodes` sees it: a crash after 6 s, a clean stop
after its restart grace; or a second copy that could not be made when the archive
was written, no other node being live then), and has a live node that takes new work
and lacks it fetch a copy from one that has it (`keep_two_copies`). An archive whose
every holder is lost waits for one of them to come back.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from corral.storage import Blob, BlobStore, Database

from . import lost, store
from .blobs import ClusterBlobs

log = logging.getLogger("corral.nodes.archives")

LEASE = "blob-copies"
CHECK_SECONDS = 5.0
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
    await blobs.note_copies(blob.sha256, [blobs.signer.node_name] + ([holder] if holder else []))
    if holder is None:
        log.warning("%s: no other node holds a copy yet (archive %s)", what, blob.sha256)
    else:
        log.info("%s: node %s holds a copy (archive %s, %d bytes)", what, holder, blob.sha256, blob.size_bytes)
    return blob.sha256


async def keep_two_copies(blobs: BlobStore, db: Database, node_name: str) -> int:
    """One round of the cluster's job (see the module's docstring); returns how many
    copies were made."""
    if not isinstance(blobs, ClusterBlobs):
        return 0
    gone = await lost.lost_nodes(db, node_name)
    short = await blobs.copies_to_check(gone)
    if not short:
        return 0
    lost_since = store.lost_before()
    records = await store.all_nodes(db)
    known = {record.name for record in records}
    live = {record.name for record in records if store.seen_state(record, lost_since) != store.LOST}
    takers = [record.name for record in records if store.seen_state(record, lost_since) == store.ACTIVE]
    made = 0
    for sha256, holders in short.items():
        kept = {holder for holder in holders if holder in known and holder not in gone}
        if not holders & live:  # no copy to fetch from now: it comes back with its node
            continue
        if len(kept) < 2:
            target = await _copy_somewhere(blobs, sha256, [node for node in takers if node not in holders])
            if target is None:
                continue
            log.warning("archive %s had %d copy left on the live nodes; node %s holds another now", sha256, len(kept), target)
            made += 1
            kept.add(target)
        if len(kept) >= 2:
            await blobs.forget_copies(sha256, sorted(holders - kept))  # a lost node's copy no longer counts
    return made


async def _copy_somewhere(blobs: ClusterBlobs, sha256: str, candidates: list[str]) -> str | None:
    """Have one of `candidates` (from one the digest picks) hold the blob; which one did."""
    if not candidates:
        return None
    start = int(sha256[:8], 16) % len(candidates)
    for node in candidates[start:] + candidates[:start]:
        if node == blobs.signer.node_name:
            try:
                await blobs.verified_path(sha256)
            except Exception as exc:
                log.warning("archive %s could not be fetched here: %s", sha256, exc)
                continue
        elif not await blobs.copy_to(sha256, node):
            continue
        await blobs.note_copies(sha256, [node])
        return node
    return None


async def forget_archive(blobs: BlobStore, archive_sha256: str) -> None:
    """An archive no one needs any more, on every live node."""
    try:
        if isinstance(blobs, ClusterBlobs):
            await blobs.delete_everywhere(archive_sha256)
        else:
            await blobs.delete(archive_sha256)
    except Exception as exc:
        log.warning("the archive %s could not be removed everywhere: %s", archive_sha256, exc)
