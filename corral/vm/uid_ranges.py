"""Host uid ranges of running instances: one each, never shared by two live instances
on the machine.

An instance's root is a host uid of its own range, so per-uid kernel state (the key
quota and keyrings, `RLIMIT_NPROC`, signal permissions across namespaces, the owner
of anything a path bug might expose) is never shared between tenants. The files'
owners on disk stay in the one shared range of the templates (`uid_base`): the
launcher mounts the layers idmapped, so templates, forks and snapshots are copied
and shared as they are.

The registry is machine-wide, not the node's, because several nodes (and test
servers) on one machine share the host's uid space: a file per claimed range under
`/run/corral/uid-ranges` (a tmpfs: after a reboot no instance runs, and none holds a
range), created with `O_EXCL` under a lock. A claim names its instance and, once it
runs, its init's pid and start time: a claim whose process is gone (a node that
crashed) is taken over; one still launching is trusted for `LAUNCH_GRACE` seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

from .proc import process_start_time

RANGE_SIZE = 65536
FIRST_BASE = 1 << 28
"""268435456: far above the ids of users, system services and subordinate ranges
(/etc/subuid starts at 100000), and below 2^32 - 1, the invalid id."""
SLOTS = ((1 << 32) - 2 - FIRST_BASE) // RANGE_SIZE
LAUNCH_GRACE = 600.0
REGISTRY = Path("/run/corral/uid-ranges")


class UidRangesExhausted(RuntimeError):
    pass


class UidRanges:
    def __init__(self, registry: Path = REGISTRY) -> None:
        self.registry = Path(registry)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.registry.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.registry / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _path(self, base: int) -> Path:
        return self.registry / str(base)

    def claim(self, instance_id: str) -> int:
        """A free range's first uid, now this instance's."""
        with self._locked():
            start = random.randrange(SLOTS)
            for offset in range(SLOTS):
                base = FIRST_BASE + ((start + offset) % SLOTS) * RANGE_SIZE
                if self._take(base, instance_id):
                    return base
        raise UidRangesExhausted("no host uid range is free")

    def _take(self, base: int, instance_id: str) -> bool:
        path = self._path(base)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            if not self._stale(path):
                return False
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{instance_id}\n")
        return True

    @staticmethod
    def _stale(path: Path) -> bool:
        try:
            fields = path.read_text().split()
            age = time.time() - path.stat().st_mtime
        except OSError:
            return True
        if len(fields) >= 3:
            return str(process_start_time(int(fields[1]))) != fields[2]
        return age > LAUNCH_GRACE

    def running(self, base: int, instance_id: str, init_pid: int, started: int | None) -> None:
        """The instance runs (its init's pid and start time, `proc.process_start_time`):
        its claim now lasts as long as that init."""
        with self._locked():
            path = self._path(base)
            if self._owner(path) == instance_id:
                tmp = path.with_name(f".{base}.tmp")
                tmp.write_text(f"{instance_id} {init_pid} {started or 0}\n")
                os.replace(tmp, path)

    def release(self, base: int, instance_id: str) -> None:
        with self._locked():
            path = self._path(base)
            if self._owner(path) == instance_id:
                path.unlink(missing_ok=True)

    def owned(self, instance_id: str) -> list[int]:
        """The ranges claimed for `instance_id` (tests, and the driver's cleanup)."""
        if not self.registry.is_dir():
            return []
        return [int(p.name) for p in self.registry.iterdir() if p.name.isdigit() and self._owner(p) == instance_id]

    @staticmethod
    def _owner(path: Path) -> str | None:
        try:
            text = path.read_text().split()
        except OSError:
            return None
        return text[0] if text else None
