"""Copies of the template cluster kept ready, each on a disk of its own.

A new server needs a disk (an ext4 image formatted and mounted, 15 to 40 ms) holding a
copy of the template cluster (46 MB, 50 to 200 ms on a busy node): most of a create.
Both are made ahead of time, off the create's path: `ReadyCopies.run` (a task of the
node's) keeps `WANTED` of them as `<root>/.ready-<token>/disk.img` with `ready` beside
it, and a create renames one to its server's directory and mounts its disk
(`take`, a few ms).

A ready copy's disk is unmounted: nothing of it is live, so one a stopped control plane
left is used by the next (only ones without `ready`, cut short, are removed). A copy
is of one disk size, the size of the last create that asked (creates of other sizes
make their own disk and copy, as without ready copies).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from ..disk import DiskStore
from . import files
from .layout import Layout

log = logging.getLogger("corral.vm.postgres")

WANTED = 2
"""Ready copies kept: back-to-back creates find one while the one taken is replaced."""
PREFIX = ".ready-"
MARK = "ready"
"""Written last, holding the copy's disk size: a copy without it is unfinished."""


class ReadyCopies:
    def __init__(self, layout: Layout, disks: Callable[[], DiskStore], prepare_template: Callable[[], Awaitable[None]]) -> None:
        self.layout = layout
        self._disks = disks
        self._prepare_template = prepare_template
        self._size_mb: int | None = None
        self._wanted = trio.Event()
        self.running = False

    def _copies(self) -> list[Path]:
        if not self.layout.root.is_dir():
            return []
        return sorted(self.layout.root.glob(PREFIX + "*"))

    @staticmethod
    def _size_of(copy: Path) -> int | None:
        try:
            return int(json.loads((copy / MARK).read_text())["size_mb"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def ready(self, size_mb: int) -> list[Path]:
        return [copy for copy in self._copies() if self._size_of(copy) == size_mb]

    def want(self, size_mb: int) -> None:
        """Copies of this disk size from now on (made in the background)."""
        self._size_mb = size_mb
        self._wanted.set()

    def take(self, size_mb: int, server_dir: Path) -> bool:
        """Rename a ready copy of this size to `server_dir` (its disk unmounted: the caller
        mounts it); False when there is none (or no task keeps copies ready)."""
        if not self.running:
            return False
        for copy in self.ready(size_mb):
            (copy / MARK).unlink(missing_ok=True)
            try:
                os.rename(copy, server_dir)
            except OSError:
                continue  # taken meanwhile, or the server's directory exists
            self.want(size_mb)
            return True
        self.want(size_mb)
        return False

    async def run(self) -> None:
        """Keep `WANTED` copies of the wanted size ready, until cancelled (the node stops)."""
        self.running = True
        try:
            for copy in self._copies():
                if self._size_of(copy) is None:  # cut short by a stop
                    await self._discard(copy)
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                size_mb = self._size_mb
                while size_mb is not None and len(self.ready(size_mb)) < WANTED:
                    try:
                        await self._make(size_mb)
                    except Exception as exc:  # a create makes its own then, and reports what fails
                        log.warning("could not make a ready database server copy: %s", exc)
                        break
        finally:
            self.running = False

    async def _make(self, size_mb: int) -> None:
        await self._prepare_template()
        copy = self.layout.root / f"{PREFIX}{secrets.token_hex(8)}"
        copy.mkdir(mode=0o711)
        try:
            mount = await self._disks().create(copy, size_mb)
            await trio.to_thread.run_sync(files.copy_tree, self.layout.template / "data", mount / "data", True)
            await self._disks().remove(copy)  # unmounted while it waits
            (copy / MARK).write_text(json.dumps({"size_mb": size_mb}))
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._discard(copy)
            raise

    async def _discard(self, copy: Path) -> None:
        with contextlib.suppress(Exception):
            await self._disks().remove(copy)
        await trio.to_thread.run_sync(files.remove_tree, copy)
