"""Artifacts: a directory of an instance packed into a deterministic tar, and back.

Packing reads the instance's files from the host side of its root (the runtime's
`host_path`), in a worker thread, with no round trip per file through the guest
agent. That root belongs to the tenant, so nothing in it is trusted: every path
component is opened relative to its parent's descriptor with `O_NOFOLLOW` (a
symlink there would otherwise resolve against the host's root), only regular files
are taken (symlinks, devices, FIFOs are skipped), and each file is checked again
with `fstat` after it is opened.

The tar is deterministic so that identical content gives the same `artifact_sha256`:
entries sorted by path, mtime 0, owner 0/0 without names, mode 0644 or 0755 (the
owner's execute bit kept), GNU format. Directories are implied by their files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

MAX_ARTIFACT_BYTES = 1024 * 1024 * 1024
"""Files of one artifact, 1 GiB in all; more is 422 `ARTIFACT_TOO_LARGE`."""
MAX_ARTIFACT_FILES = 100_000
CHUNK = 1024 * 1024


class ArtifactTooLarge(Exception):
    pass


class OutputPathMissing(Exception):
    pass


@dataclass(frozen=True)
class Packed:
    tar_path: Path
    sha256: str
    size_bytes: int
    source_sha256: str
    manifest: dict[str, Any] = field(hash=False)

    @property
    def file_count(self) -> int:
        return int(self.manifest["file_count"])


class _Hashing:
    """A reader that hashes what tarfile reads through it (and copies it to `copy`)."""

    def __init__(self, handle: BinaryIO, copy: BinaryIO | None = None) -> None:
        self.handle = handle
        self.copy = copy
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        if self.copy is not None:
            self.copy.write(data)
        return data


class _HashingWriter:
    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.handle.flush()


def _open_dir(root: Path, relative: str) -> int:
    """A descriptor of `root/relative`, every component opened without following links."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in relative.split("/") if p and p != "."]:
            if part == "..":
                raise OutputPathMissing(relative)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError, OSError) as exc:
                raise OutputPathMissing(relative) from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _regular_files(top_fd: int) -> list[tuple[str, int, int]]:
    """(relative path, directory fd owner index, mode) of every regular file, sorted."""
    found: list[tuple[str, int, int]] = []
    for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top_fd):
        dirnames.sort()
        for name in filenames:
            try:
                info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                path = os.path.normpath(os.path.join(dirpath, name))
                found.append((path, info.st_size, info.st_mode))
    found.sort()
    return found


def _open_file(top_fd: int, relative: str) -> int:
    parts = relative.split("/")
    fd = os.dup(top_fd)
    try:
        for part in parts[:-1]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise OSError(f"{relative} is no longer a regular file")
    return file_fd


def _copy_target(directory: Path, relative: str, mode: int) -> BinaryIO:
    target = directory / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    return os.fdopen(fd, "wb")


def pack(root: Path, directory: str, work_dir: Path, copy_into: Path | None = None) -> Packed | None:
    """Pack the regular files under `root/directory` into a tar in `work_dir`; None when
    there are none. With `copy_into`, the files are also written there as they are read
    (the tree the router serves, without unpacking the tar again). Runs in a worker thread."""
    top_fd = _open_dir(root, directory)
    try:
        files = _regular_files(top_fd)
        if not files:
            return None
        if len(files) > MAX_ARTIFACT_FILES:
            raise ArtifactTooLarge(f"{len(files)} files; at most {MAX_ARTIFACT_FILES}")
        total = sum(size for _, size, _ in files)
        if total > MAX_ARTIFACT_BYTES:
            raise ArtifactTooLarge(f"{total} bytes; at most {MAX_ARTIFACT_BYTES}")
        work_dir.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=work_dir, suffix=".tar")
        tar_path = Path(name)
        entries: list[dict[str, Any]] = []
        try:
            with os.fdopen(handle, "wb") as raw:
                writer = _HashingWriter(raw)
                with tarfile.open(fileobj=writer, mode="w", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
                    for path, _, mode in files:
                        try:
                            file_fd = _open_file(top_fd, path)
                        except OSError:
                            continue  # it went away meanwhile
                        with os.fdopen(file_fd, "rb") as source:
                            size = os.fstat(source.fileno()).st_size
                            info = tarfile.TarInfo(path)
                            info.size = size
                            info.mtime = 0
                            info.mode = 0o755 if mode & stat.S_IXUSR else 0o644
                            info.uid = info.gid = 0
                            info.uname = info.gname = ""
                            copy = _copy_target(copy_into, path, info.mode) if copy_into is not None else None
                            try:
                                reader = _Hashing(source, copy)
                                tar.addfile(info, reader)
                            finally:
                                if copy is not None:
                                    copy.close()
                            entries.append({"path": path, "size_bytes": size, "sha256": reader.digest.hexdigest()})
                writer.flush()
        except BaseException:
            tar_path.unlink(missing_ok=True)
            raise
    finally:
        os.close(top_fd)
    tree = hashlib.sha256()
    for entry in entries:
        tree.update(f"{entry['path']}\0{entry['sha256']}\n".encode())
    manifest = {"files": entries, "file_count": len(entries), "total_bytes": sum(e["size_bytes"] for e in entries)}
    return Packed(tar_path, writer.digest.hexdigest(), writer.size, tree.hexdigest(), manifest)


def adopt_tree(staging: Path, destination: Path) -> None:
    """Make `staging` (a copy made by `pack`) the unpacked artifact at `destination`, in
    one rename; when another publish of the same content got there first, drop it."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not destination.exists():
            os.rename(staging, destination)
    except OSError:
        if not destination.exists():
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def unpack(tar_path: Path, destination: Path) -> None:
    """Extract an artifact into `destination` once (into a temporary sibling, then one
    rename, so a reader never sees half a directory). Runs in a worker thread."""
    if destination.exists():
        return
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=".unpack-"))
    try:
        with tarfile.open(tar_path, mode="r") as tar:
            tar.extractall(staging, filter="data")
        try:
            os.rename(staging, destination)
        except OSError:
            if not destination.exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
