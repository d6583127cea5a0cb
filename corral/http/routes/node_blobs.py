"""`GET /api/v1/nodes/blobs/{digest}`: one node's blob, for another node of the cluster (issue 30).

What `corral.actors.nodes.blobs.ClusterBlobs` asks a node for when it lacks a blob:
only this node's own copy (never fetched from a third node in turn), streamed. The
caller must be a node of the cluster: the request carries a signature over the blob's
digest under a key every node derives from the store's shared secret; without a good
one, and for a blob this node does not hold, the answer is the same `404`, so the
route says nothing to anyone else about what is stored.

`POST .../hold` asks this node to keep a copy of another node's blob (it fetches it as
it fetches any blob it lacks, and answers once it holds it); `DELETE .../hold` to drop
its copy. Both are signed as the fetch is, over their own words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
from quart import Response

from corral.actors.nodes.blobs import DROP, HEADER, PULL, BlobSigner, ClusterBlobs
from corral.errors import ApiError, not_found
from corral.storage.blobs import BlobCorrupted, BlobNotFound

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router

router = Router("nodes")

CHUNK = 1 << 20
BLOB_RPM = 60_000
"""Per address: the other nodes, each fetching what it lacks."""


@router.get("/nodes/blobs/{digest}", summary="A blob this node holds, for another node of the cluster (signed)",
            auth="public", public_rpm=BLOB_RPM, internal=True)
async def node_blob(ctx: RequestContext, digest: str) -> Response:
    sha256 = digest
    blobs = ctx.platform.blobs
    gone = not_found("no such blob here")
    signed = ctx.request.headers.get(HEADER)
    if not isinstance(blobs, ClusterBlobs) or BlobSigner(ctx.platform.jwt_secret, ctx.platform.settings.node_name).check(signed, sha256) is None:
        raise gone
    try:
        path = await blobs.local_path(sha256)
    except (BlobNotFound, BlobCorrupted) as exc:
        raise gone from exc

    async def body() -> AsyncIterator[bytes]:
        async with await trio.open_file(path, "rb") as handle:
            while chunk := await handle.read(CHUNK):
                yield chunk

    response = Response(body(), status=200, content_type="application/octet-stream")
    response.headers["Content-Length"] = str(path.stat().st_size)
    response.timeout = None
    return response


def _cluster_blobs(ctx: RequestContext, signed_words: str) -> ClusterBlobs:
    """The node's cluster blob store, when the request is a node's, signed over `signed_words`."""
    blobs = ctx.platform.blobs
    signer = BlobSigner(ctx.platform.jwt_secret, ctx.platform.settings.node_name)
    if not isinstance(blobs, ClusterBlobs) or signer.check(ctx.request.headers.get(HEADER), signed_words) is None:
        raise not_found("no such blob here")
    return blobs


@router.post("/nodes/blobs/{digest}/hold", summary="Keep a copy of another node's blob (signed)",
             auth="public", public_rpm=BLOB_RPM, internal=True)
async def hold_blob(ctx: RequestContext, digest: str) -> Reply:
    blobs = _cluster_blobs(ctx, PULL + digest)
    try:
        path = await blobs.verified_path(digest)
    except (BlobNotFound, BlobCorrupted) as exc:
        raise ApiError(502, "BLOB_UNAVAILABLE", f"the blob could not be fetched: {exc}") from exc
    return data({"sha256": digest, "size_bytes": path.stat().st_size, "node": ctx.platform.settings.node_name})


@router.delete("/nodes/blobs/{digest}/hold", summary="Drop this node's copy of a blob (signed)",
               auth="public", public_rpm=BLOB_RPM, internal=True)
async def drop_blob(ctx: RequestContext, digest: str) -> Reply:
    blobs = _cluster_blobs(ctx, DROP + digest)
    await blobs.delete(digest)
    return data({"sha256": digest, "deleted": True})
