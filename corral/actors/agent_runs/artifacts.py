"""Capturing a run's declared artifacts into the blob store, after its command ended.

Each absolute path in `metadata.artifact_paths` is read from the target and kept as
a content-addressed blob (`persisted`, with its SHA-256), so it outlives the target.
A path that is missing, not a regular file or larger than `MAX_ARTIFACT_BYTES` is
recorded `failed` with the reason.
"""

from __future__ import annotations

import mimetypes
import posixpath
from typing import Any

from corral.actors.runtime_errors import public_text
from corral.ids import new_uuid
from corral.storage import BlobStore, utc_now_iso
from corral.vm import AgentClient, RuntimeErrorBase

from .store import ArtifactRecord

MAX_ARTIFACTS = 50
MAX_ARTIFACT_BYTES = 100 * 1024 * 1024
MAX_PATH = 4096


def artifact_paths(metadata: dict[str, Any]) -> list[str]:
    paths = metadata.get("artifact_paths") or []
    return [str(path) for path in paths]


def paths_problem(value: Any) -> str | None:
    """Why `metadata.artifact_paths` is unacceptable, or None."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        return "artifact_paths must be an array of strings"
    if len(value) > MAX_ARTIFACTS:
        return f"artifact_paths may list at most {MAX_ARTIFACTS} paths"
    for path in value:
        if not path.startswith("/") or len(path) > MAX_PATH or "\x00" in path:
            return f"artifact path {path[:100]!r} must be an absolute path of at most {MAX_PATH} characters"
    return None


async def capture(agent: AgentClient, blobs: BlobStore, run_id: str, tenant_id: str, paths: list[str]) -> list[ArtifactRecord]:
    records = []
    for path in paths:
        records.append(await _capture_one(agent, blobs, run_id, tenant_id, path))
    return records


async def _capture_one(agent: AgentClient, blobs: BlobStore, run_id: str, tenant_id: str, path: str) -> ArtifactRecord:
    name = posixpath.basename(path.rstrip("/")) or path
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    now = utc_now_iso()
    base = ArtifactRecord(
        id=new_uuid(), run_id=run_id, tenant_id=tenant_id, path=path, name=name, size_bytes=None,
        content_type=content_type, status="failed", sha256=None, persisted=0, storage_backend=None,
        persisted_at=None, error=None, created_at=now,
    )
    try:
        info = await agent.stat(path)
    except RuntimeErrorBase:
        return _failed(base, "file not found")
    if info.get("type") not in (None, "file"):
        return _failed(base, "not a regular file")
    size = int(info.get("size_bytes") or info.get("size") or 0)
    if size > MAX_ARTIFACT_BYTES:
        return _failed(base, f"larger than {MAX_ARTIFACT_BYTES} bytes", size)
    try:
        content = await agent.read_file(path, max_bytes=MAX_ARTIFACT_BYTES)  # it may have grown since
    except RuntimeErrorBase as exc:
        return _failed(base, f"could not be read: {public_text(exc, 'artifact')}", size)
    blob = await blobs.put_bytes(content.data)
    return ArtifactRecord(
        **{
            **_fields(base),
            "size_bytes": blob.size_bytes,
            "status": "available",
            "sha256": blob.sha256,
            "persisted": 1,
            "storage_backend": blobs.backend,
            "persisted_at": utc_now_iso(),
        }
    )


def _fields(record: ArtifactRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in ArtifactRecord.__dataclass_fields__}


def _failed(base: ArtifactRecord, reason: str, size: int | None = None) -> ArtifactRecord:
    return ArtifactRecord(**{**_fields(base), "error": reason, "size_bytes": size})
