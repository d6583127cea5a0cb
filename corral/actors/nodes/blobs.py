"""Blobs any node of the cluster holds, on every node (issue 30).

Each node keeps its blobs in its own data directory (`LocalBlobStore`): a deployment's
artifact is written where it was published, a run's artifacts where the run
captured them, a backup where it was taken. Any node may need one of them later: its
preview router serves a static version through whichever node a browser reached, a
deployment service may boot on another node, an artifact download may reach any node.

`ClusterBlobs` is the node's blob store: writes stay local; a read of a blob this
node lacks asks the other live nodes for it, one at a time
(`GET /api/v1/nodes/blobs/{digest}` on their advertised URL), streams it into the
local store and serves it from there from then on. A blob is named by its SHA-256, so
what arrives is checked by what it is called: bytes that hash to anything else are
not taken (the local store names what it writes by its own digest), whatever a node
sends. The request is signed like a forwarded one (an HMAC under a key derived from
the store's shared secret, its own derivation, with the time, good for a minute), so
only the nodes of the cluster read blobs this way: a blob's digest alone (in a
version's `artifact_sha256`) is no key to its bytes.

Only one fetch of a blob runs at a time on a node; the readers of the same blob wait
for it. On a store only one node uses (SQLite) the local store is the node's store.

A blob that must outlive its node (a computer snapshot's archive) is copied to one
other live node when it is written (`copy_elsewhere`: that node is asked, signed the
same way, to fetch it as above, and answers once it holds it), and removed from every
live node when it goes (`delete_everywhere`). The nodes that hold such a blob are
recorded in `blob_copies` (`note_copies`; a node that fetches one adds itself), so
that a copy lost with its node is made again elsewhere (`archives.keep_two_copies`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable
from pathlib import Path

import httpx
import trio

from corral.storage import Database
from corral.storage.blobs import Blob, BlobNotFound, LocalBlobStore, check_digest

from . import store
from .signing import NodeSigner

log = logging.getLogger("corral.nodes.blobs")

HEADER = "X-Corral-Blob-Request"
PATH = "/api/v1/nodes/blobs/{digest}"
HOLD_PATH = "/api/v1/nodes/blobs/{digest}/hold"
HOLD_TIMEOUT = httpx.Timeout(None, connect=5.0)
"""The node asked to hold a copy answers once it has fetched the whole blob."""
PULL = "hold "
DROP = "drop "
"""What a request to hold or to drop a blob signs, before the digest (so that neither
signature stands for a fetch, nor one for the other)."""
FETCH_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
"""Between two chunks (a node that stops sending is left for the next); no bound on
the whole transfer, which a large backup needs."""


class BlobSigner:
    """Signs a node's request for a blob (over its digest); checks another node's."""

    def __init__(self, signing_secret: str, node_name: str) -> None:
        self.signer = NodeSigner(signing_secret, b"corral node blob fetch v1", node_name)
        self.node_name = node_name

    def sign(self, sha256: str) -> str:
        return " ".join(self.signer.sign(sha256))

    def check(self, value: str | None, sha256: str) -> str | None:
        """The asking node's name when the signature holds for this blob and is fresh."""
        parts = (value or "").split(" ")
        if len(parts) != 3 or not self.signer.verify(parts[0], sha256, parts[1], parts[2]):
            return None
        return parts[0]


class ClusterBlobs:
    """The node's blob store: its own blobs, and the other live nodes' on first read."""

    def __init__(self, local: LocalBlobStore, db: Database, signer: BlobSigner) -> None:
        self.local = local
        self.db = db
        self.signer = signer
        self.backend = local.backend
        self._fetching: dict[str, trio.Lock] = {}

    def uri(self, sha256: str) -> str:
        return self.local.uri(sha256)

    async def put_bytes(self, data: bytes) -> Blob:
        return await self.local.put_bytes(data)

    async def put_file(self, source: Path) -> Blob:
        return await self.local.put_file(source)

    async def put_stream(self, chunks: AsyncIterable[bytes]) -> Blob:
        return await self.local.put_stream(chunks)

    async def exists(self, sha256: str) -> bool:
        return await self.local.exists(sha256)

    async def delete(self, sha256: str) -> None:
        await self.local.delete(sha256)

    async def local_path(self, sha256: str) -> Path:
        """This node's own copy, verified (never fetched: what a node serves the others)."""
        return await self.local.verified_path(sha256)

    async def verified_path(self, sha256: str) -> Path:
        check_digest(sha256)
        try:
            return await self.local.verified_path(sha256)
        except BlobNotFound:
            pass
        lock = self._fetching.setdefault(sha256, trio.Lock())
        try:
            async with lock:
                if not await self.local.exists(sha256):  # another reader fetched it meanwhile
                    await self._fetch(sha256)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._fetching.pop(sha256, None)
        return await self.local.verified_path(sha256)

    async def _peers(self) -> list[store.NodeRecord]:
        """The other live nodes, by name."""
        lost_since = store.lost_before()
        return [
            record for record in await store.all_nodes(self.db)
            if record.name != self.signer.node_name and store.seen_state(record, lost_since) != store.LOST
        ]

    async def copy_elsewhere(self, sha256: str) -> str | None:
        """Have one other live node hold a copy of this node's blob; the name of the node
        that does, or None when none could (no other live node, or none answered). The
        nodes are tried from one the digest picks, so copies spread over the cluster."""
        check_digest(sha256)
        peers = await self._peers()
        if not peers:
            return None
        start = int(sha256[:8], 16) % len(peers)
        async with httpx.AsyncClient(timeout=HOLD_TIMEOUT) as client:
            for peer in peers[start:] + peers[:start]:
                if await self._hold_on(client, peer, sha256):
                    return peer.name
        return None

    async def copy_to(self, sha256: str, node: str) -> bool:
        """Have the live node `node` hold a copy of this node's blob; whether it does."""
        check_digest(sha256)
        peer = next((record for record in await self._peers() if record.name == node), None)
        if peer is None:
            return False
        async with httpx.AsyncClient(timeout=HOLD_TIMEOUT) as client:
            return await self._hold_on(client, peer, sha256)

    async def _hold_on(self, client: httpx.AsyncClient, peer: store.NodeRecord, sha256: str) -> bool:
        url = peer.advertise_url.rstrip("/") + HOLD_PATH.format(digest=sha256)
        try:
            answer = await client.post(url, headers={HEADER: self.signer.sign(PULL + sha256)})
        except (httpx.HTTPError, OSError) as exc:
            log.warning("node %s could not be asked to hold blob %s: %s", peer.name, sha256, exc)
            return False
        if answer.status_code != 200:
            log.warning("node %s answered %s when asked to hold blob %s", peer.name, answer.status_code, sha256)
        return answer.status_code == 200

    # -- where the copies of a kept blob are ------------------------------------------

    async def note_copies(self, sha256: str, nodes: list[str]) -> None:
        """`nodes` hold the blob, one kept on two nodes."""
        await self.db.transaction(lambda tx: [
            tx.execute("INSERT INTO blob_copies (sha256, node) VALUES (?, ?) ON CONFLICT (sha256, node) DO NOTHING", (sha256, node))
            for node in nodes
        ])

    async def _note_fetched(self, sha256: str) -> None:
        """This node fetched the blob: one more copy, if it is one of those kept."""
        await self.db.execute(
            "INSERT INTO blob_copies (sha256, node) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM blob_copies WHERE sha256 = ?)"
            " ON CONFLICT (sha256, node) DO NOTHING",
            (sha256, self.signer.node_name, sha256),
        )

    async def copies_to_check(self, gone: list[str]) -> dict[str, set[str]]:
        """The holders of each kept blob with fewer than two recorded, or one on a node
        in `gone`."""
        short = "SELECT sha256 FROM blob_copies GROUP BY sha256 HAVING COUNT(*) < 2"
        if gone:
            short += f" UNION SELECT sha256 FROM blob_copies WHERE node IN ({', '.join('?' for _ in gone)})"
        rows = await self.db.fetch_all(f"SELECT sha256, node FROM blob_copies WHERE sha256 IN ({short})", tuple(gone))
        holders: dict[str, set[str]] = {}
        for row in rows:
            holders.setdefault(str(row["sha256"]), set()).add(str(row["node"]))
        return holders

    async def forget_copies(self, sha256: str, nodes: list[str]) -> None:
        """`nodes` are no longer counted as holding the blob."""
        await self.db.transaction(lambda tx: [
            tx.execute("DELETE FROM blob_copies WHERE sha256 = ? AND node = ?", (sha256, node)) for node in nodes
        ])

    async def delete_everywhere(self, sha256: str) -> None:
        """Remove the blob here and from every other live node (a node down now keeps its
        copy, which nothing names any more)."""
        await self.db.execute("DELETE FROM blob_copies WHERE sha256 = ?", (sha256,))
        await self.local.delete(sha256)
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT) as client:
            for peer in await self._peers():
                url = peer.advertise_url.rstrip("/") + HOLD_PATH.format(digest=sha256)
                try:
                    await client.delete(url, headers={HEADER: self.signer.sign(DROP + sha256)})
                except (httpx.HTTPError, OSError) as exc:
                    log.warning("node %s could not be asked to drop blob %s: %s", peer.name, sha256, exc)

    async def _fetch(self, sha256: str) -> None:
        peers = await self._peers()
        tried = []
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT) as client:
            for peer in peers:
                tried.append(peer.name)
                if await self._fetch_from(client, peer.name, peer.advertise_url, sha256):
                    log.info("blob %s fetched from node %s", sha256, peer.name)
                    await self._note_fetched(sha256)
                    return
        where = f" (asked {', '.join(tried)})" if tried else " (no other live node)"
        raise BlobNotFound(f"no blob {sha256} on this node or any other{where}")

    async def _fetch_from(self, client: httpx.AsyncClient, name: str, base_url: str, sha256: str) -> bool:
        url = base_url.rstrip("/") + PATH.format(digest=sha256)
        try:
            async with client.stream("GET", url, headers={HEADER: self.signer.sign(sha256)}) as answer:
                if answer.status_code != 200:
                    if answer.status_code != 404:
                        log.warning("node %s answered %s for blob %s", name, answer.status_code, sha256)
                    return False
                blob = await self.local.put_stream(answer.aiter_bytes())
        except (httpx.HTTPError, OSError) as exc:
            log.warning("blob %s could not be fetched from node %s: %s", sha256, name, exc)
            return False
        if blob.sha256 != sha256:
            log.warning("node %s sent bytes that are not blob %s (they hash to %s): not taken", name, sha256, blob.sha256)
            return False
        return True


__all__ = ["DROP", "HEADER", "HOLD_PATH", "PATH", "PULL", "BlobSigner", "ClusterBlobs"]
