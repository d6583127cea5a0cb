"""The content-addressed blob store: written once, shared, verified on read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio

from corral.storage import Blob, BlobCorrupted, BlobNotFound, LocalBlobStore


async def test_bytes_files_and_streams_share_one_blob(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    payload = os.urandom(3 * (1 << 20) + 17)
    digest = hashlib.sha256(payload).hexdigest()
    source = tmp_path / "source.bin"
    source.write_bytes(payload)

    async def chunks():  # type: ignore[no-untyped-def]
        for start in range(0, len(payload), 65536):
            yield payload[start : start + 65536]

    assert await store.put_bytes(payload) == Blob(digest, len(payload))
    assert await store.put_file(source) == Blob(digest, len(payload))
    assert await store.put_stream(chunks()) == Blob(digest, len(payload))
    path = await store.verified_path(digest)
    assert path.read_bytes() == payload
    assert list((tmp_path / "blobs" / "sha256").rglob("*")) == [path.parent, path]
    assert list((tmp_path / "blobs" / "incoming").iterdir()) == []
    assert store.uri(digest) == f"blob://sha256/{digest}"
    assert await store.exists(digest)


async def test_a_blob_is_read_only_and_verified(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    blob = await store.put_bytes(b"hello")
    path = await store.verified_path(blob.sha256)
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert path.stat().st_mode & 0o777 == 0o444
    os.chmod(path, 0o644)
    path.write_bytes(b"HELLO")  # corrupted behind the store's back
    with pytest.raises(BlobCorrupted):
        await LocalBlobStore(tmp_path / "blobs").verified_path(blob.sha256)
    with pytest.raises(BlobCorrupted):
        await store.verified_path(blob.sha256)  # the change of size and mtime is noticed


async def test_missing_and_malformed_digests(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    with pytest.raises(BlobNotFound):
        await store.verified_path("0" * 64)
    with pytest.raises(BlobNotFound):
        await store.verified_path("../../etc/passwd")
    blob = await store.put_bytes(b"x")
    await store.delete(blob.sha256)
    assert not await store.exists(blob.sha256)
    with pytest.raises(BlobNotFound):
        await store.verified_path(blob.sha256)


async def test_a_failed_stream_leaves_nothing(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")

    async def broken():  # type: ignore[no-untyped-def]
        yield b"partial"
        await trio.lowlevel.checkpoint()
        raise OSError("source went away")

    with pytest.raises(OSError):
        await store.put_stream(broken())
    assert list((tmp_path / "blobs" / "incoming").iterdir()) == []
    assert not (tmp_path / "blobs" / "sha256").exists()
