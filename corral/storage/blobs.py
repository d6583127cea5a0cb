"""Content-addressed blob storage: deployment artifacts, database backups, run artifacts.

A blob is named by the SHA-256 of its bytes, so identical content is stored once and
a blob never changes after it is written. `BlobStore` is the interface the parts use;
`LocalBlobStore` keeps blobs under the data directory, and an S3-compatible store can
implement the same methods later (`uri` and `backend` say where a blob lives).

Writes stream into a temporary file beside the final one while hashing, then rename
it into place: a crash leaves no half-written blob under a valid name. Reads are
verified: the first `verified_path` of a blob in a process re-hashes it and refuses a
file whose bytes no longer match its name (disk corruption, a hand edit); later reads
of an unchanged file (same size, mtime and inode) skip the hash.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import trio

CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class BlobNotFound(LookupError):
    """No blob with that digest is stored."""


class BlobCorrupted(RuntimeError):
    """A stored blob's bytes no longer hash to its name."""


@dataclass(frozen=True)
class Blob:
    sha256: str
    size_bytes: int


class BlobStore(Protocol):
    backend: str

    async def put_file(self, source: Path) -> Blob: ...

    async def put_bytes(self, data: bytes) -> Blob: ...

    async def put_stream(self, chunks: AsyncIterable[bytes]) -> Blob: ...

    async def verified_path(self, sha256: str) -> Path: ...

    async def exists(self, sha256: str) -> bool: ...

    async def delete(self, sha256: str) -> None: ...

    def uri(self, sha256: str) -> str: ...


def check_digest(sha256: str) -> str:
    if not _SHA256.match(sha256):
        raise BlobNotFound(f"not a SHA-256 digest: {sha256!r}")
    return sha256


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class LocalBlobStore:
    """Blobs as files `<root>/sha256/<first two hex>/<digest>`, written once."""

    backend = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._incoming = self.root / "incoming"
        self._verified: dict[str, tuple[int, int, int]] = {}

    def path_of(self, sha256: str) -> Path:
        check_digest(sha256)
        return self.root / "sha256" / sha256[:2] / sha256

    def uri(self, sha256: str) -> str:
        return f"blob://sha256/{check_digest(sha256)}"

    async def put_bytes(self, data: bytes) -> Blob:
        return await trio.to_thread.run_sync(self._write_chunks, [data])

    async def put_file(self, source: Path) -> Blob:
        return await trio.to_thread.run_sync(self._copy_file, Path(source))

    async def put_stream(self, chunks: AsyncIterable[bytes]) -> Blob:
        handle, temp = self._temp_file()
        digest = hashlib.sha256()
        size = 0
        try:
            with handle:
                async for chunk in chunks:
                    digest.update(chunk)
                    size += len(chunk)
                    await trio.to_thread.run_sync(handle.write, chunk)
            return await trio.to_thread.run_sync(self._commit, temp, digest.hexdigest(), size)
        finally:
            temp.unlink(missing_ok=True)

    async def verified_path(self, sha256: str) -> Path:
        return await trio.to_thread.run_sync(self._verify, sha256)

    async def exists(self, sha256: str) -> bool:
        return self.path_of(sha256).exists()

    async def delete(self, sha256: str) -> None:
        self.path_of(sha256).unlink(missing_ok=True)
        self._verified.pop(sha256, None)

    # Worker-thread halves.

    def _temp_file(self) -> tuple[BinaryIO, Path]:
        self._incoming.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self._incoming)
        return os.fdopen(fd, "wb"), Path(name)

    def _write_chunks(self, chunks: Iterable[bytes]) -> Blob:
        handle, temp = self._temp_file()
        digest = hashlib.sha256()
        size = 0
        try:
            with handle:
                for chunk in chunks:
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
            return self._commit(temp, digest.hexdigest(), size)
        finally:
            temp.unlink(missing_ok=True)

    def _copy_file(self, source: Path) -> Blob:
        with open(source, "rb") as reader:
            return self._write_chunks(iter(lambda: reader.read(CHUNK), b""))

    def _commit(self, temp: Path, sha256: str, size: int) -> Blob:
        final = self.path_of(sha256)
        if not final.exists():
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(temp, 0o444)
            os.replace(temp, final)
        return Blob(sha256, size)

    def _verify(self, sha256: str) -> Path:
        path = self.path_of(sha256)
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {sha256}") from None
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if self._verified.get(sha256) != key:
            if hash_file(path) != sha256:
                raise BlobCorrupted(f"blob {sha256} does not match its digest")
            self._verified[sha256] = key
        return path
