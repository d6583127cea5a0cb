"""Snapshots of instances' files: copies of writable layers kept beside the instances.

On disk, per snapshot, under `<data_dir>/snapshots/<snapshot id>/`:

- `files/`: a copy of the instance's writable layer (`upper/`) as it was, with
  owners, modes, extended attributes and overlayfs whiteouts kept (`cp -a`,
  reflinked where the file system can);
- `manifest.json`: the instance it came from, its template and the template's root
  file system the layer goes over, its size and when it was taken.

A copy is made under `<id>.partial/` and renamed into place once complete, so a
snapshot directory is always whole; `cleanup_partial` removes what a control plane
that died mid-copy left. The store knows nothing of instances' states: freezing a
running instance around the copy, and stopping one for a restore, are the driver's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import trio

from .errors import LaunchFailed, SnapshotNotFound

SNAPSHOT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
PARTIAL = ".partial"


async def copy_tree(source: Path, dest: Path) -> None:
    """`source`'s contents into `dest` (made when missing), everything kept: owners,
    modes, times, extended attributes, device nodes (overlayfs whiteouts), sockets."""
    result = await trio.run_process(
        ["cp", "-a", "--reflink=auto", f"{source}/.", str(dest)], capture_stderr=True, check=False
    )
    if result.returncode != 0:
        raise LaunchFailed(f"copying files failed: {result.stderr.decode(errors='replace').strip()}")


async def tar_keeping_everything(doing: str, *arguments: str) -> None:
    """GNU tar with numeric owners and every extended attribute (an instance's files as
    they are, overlay whiteouts and capabilities included); `doing` names the work in
    the error. Sparse files stay sparse (`--sparse`, holes found with `SEEK_HOLE`): a
    tenant's `truncate -s 1T` costs the archive nothing, instead of a terabyte of
    zeros read and written on the node."""
    result = await trio.run_process(
        ["tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "--sparse", *arguments], capture_stderr=True, check=False
    )
    if result.returncode != 0:
        raise LaunchFailed(f"{doing} failed: {result.stderr.decode(errors='replace').strip()}")


def tree_size(root: Path) -> int:
    """Bytes of the regular files and symbolic links under `root` (their apparent sizes)."""
    total = 0
    for directory, dirs, files in os.walk(root):  # symbolic links to directories are in `dirs`, not followed
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_size
        for name in dirs:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                total += os.lstat(path).st_size
    return total


class SnapshotStore:
    """Snapshot directories under `root` (the runtime's `<data_dir>/snapshots`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, snapshot_id: str) -> Path:
        if not SNAPSHOT_ID.fullmatch(snapshot_id):
            raise SnapshotNotFound(f"invalid snapshot id: {snapshot_id!r}")
        return self.root / snapshot_id

    def files(self, snapshot_id: str) -> Path:
        return self.path(snapshot_id) / "files"

    def exists(self, snapshot_id: str) -> bool:
        return (self.path(snapshot_id) / "manifest.json").is_file()

    def manifest(self, snapshot_id: str) -> dict[str, Any]:
        """What the snapshot was taken of (raises SnapshotNotFound)."""
        try:
            return dict(json.loads((self.path(snapshot_id) / "manifest.json").read_text()))
        except FileNotFoundError:
            raise SnapshotNotFound(f"snapshot not found: {snapshot_id}") from None
        except ValueError as exc:
            raise SnapshotNotFound(f"snapshot manifest unreadable: {snapshot_id}") from exc

    async def take(self, snapshot_id: str, upper: Path, about: dict[str, Any]) -> int:
        """Copy the writable layer `upper` as `snapshot_id`; `about` goes into the manifest
        (instance id, template, lower). Returns the snapshot's size in bytes."""
        final = self.path(snapshot_id)
        partial = final.with_name(final.name + PARTIAL)
        if final.exists():
            raise LaunchFailed(f"snapshot exists already: {snapshot_id}")
        await trio.to_thread.run_sync(shutil.rmtree, partial, True)
        partial.mkdir(parents=True, mode=0o700)
        try:
            await copy_tree(upper, partial / "files")
            size = await trio.to_thread.run_sync(tree_size, partial / "files")
            manifest = {
                **about,
                "id": snapshot_id,
                "size_bytes": size,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (partial / "manifest.json").write_text(json.dumps(manifest, indent=1))
            os.replace(partial, final)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, partial, True)
            raise
        return size

    async def copy_files(self, snapshot_id: str, dest: Path) -> None:
        """The snapshot's files into `dest` (an empty directory, or made)."""
        self.manifest(snapshot_id)
        await copy_tree(self.files(snapshot_id), dest)

    async def pack(self, snapshot_id: str, dest: Path) -> None:
        """The whole snapshot (its manifest and files) as one tar at `dest`, everything
        kept as `take` keeps it (numeric owners, modes, extended attributes, whiteouts),
        uncompressed: a desktop's layer is mostly compressed files already, and the
        archive is written once per snapshot and read on a node that lacks it."""
        self.manifest(snapshot_id)
        await tar_keeping_everything("packing the snapshot", "-C", str(self.path(snapshot_id)), "-cf", str(dest), "manifest.json", "files")

    async def unpack(self, snapshot_id: str, archive: Path, lower: str) -> None:
        """Keep the snapshot `pack` made (on this node or another) from `archive`, its
        files over `lower` (this node's root file system of its template); nothing
        happens when it is here already. The archive is one this platform packed and
        the blob store verified by its digest; it is unpacked into a fresh directory
        (GNU tar refuses members outside it) and renamed into place once whole."""
        final = self.path(snapshot_id)
        if self.exists(snapshot_id):
            return
        partial = final.with_name(final.name + PARTIAL)
        await trio.to_thread.run_sync(shutil.rmtree, partial, True)
        partial.mkdir(parents=True, mode=0o700)
        try:
            await tar_keeping_everything("unpacking the snapshot", "-C", str(partial), "--same-permissions", "--same-owner", "-xf", str(archive))
            manifest = json.loads((partial / "manifest.json").read_text())
            if manifest.get("id") != snapshot_id or not (partial / "files").is_dir():
                raise LaunchFailed(f"the archive is not snapshot {snapshot_id}")
            manifest["lower"] = lower
            (partial / "manifest.json").write_text(json.dumps(manifest, indent=1))
            os.replace(partial, final)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, partial, True)
            raise

    async def delete(self, snapshot_id: str) -> None:
        """Remove the snapshot (whole or partial); nothing to remove is fine."""
        final = self.path(snapshot_id)
        for directory in (final, final.with_name(final.name + PARTIAL)):
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)

    def ids(self) -> list[str]:
        """Every whole snapshot kept here."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "manifest.json").is_file())

    async def cleanup_partial(self) -> int:
        """Remove copies a control plane left half-made when it stopped; how many went."""
        if not self.root.is_dir():
            return 0
        partial = [p for p in self.root.iterdir() if p.name.endswith(PARTIAL)]
        for directory in partial:
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)
        return len(partial)
