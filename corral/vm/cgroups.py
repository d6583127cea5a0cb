"""cgroup v1 limits for instances: CPU quota, memory, process count.

This machine mounts the v1 controllers separately under /sys/fs/cgroup/<controller>.
Each instance gets `<controller>/<parent>/<id>` in cpu, cpuacct, memory and pids; the
launcher joins them before it creates the instance's namespaces, so every process
inside is accounted and limited. A memory hog is killed by the OOM killer inside
its own cgroup; a fork bomb stops at `pids.max`. The freezer group pauses the
instance: every process stays in memory, unscheduled, until it is thawed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "freezer")
CFS_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupLimits:
    vcpus: float
    memory_mb: int
    pids_max: int


class CgroupV1:
    def __init__(self, root: Path = Path("/sys/fs/cgroup"), parent: str = "corral") -> None:
        self.root = Path(root)
        self.parent = parent

    def path(self, controller: str, instance_id: str) -> Path:
        return self.root / controller / self.parent / instance_id

    def available(self) -> bool:
        return all((self.root / c / "cgroup.procs").exists() for c in CONTROLLERS)

    def create(self, instance_id: str, limits: CgroupLimits) -> list[str]:
        """Create (or reuse) the instance's groups with `limits`; return their cgroup.procs files."""
        for controller in CONTROLLERS:
            self.path(controller, instance_id).mkdir(parents=True, exist_ok=True)
        self.apply(instance_id, limits)
        return [str(self.path(c, instance_id) / "cgroup.procs") for c in CONTROLLERS]

    def apply(self, instance_id: str, limits: CgroupLimits) -> None:
        cpu = self.path("cpu", instance_id)
        (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(max(1000, int(limits.vcpus * CFS_PERIOD_US))))
        (cpu / "cpu.shares").write_text(str(max(2, int(1024 * limits.vcpus))))
        memory = self.path("memory", instance_id)
        limit = str(limits.memory_mb * 1024 * 1024)
        memsw = memory / "memory.memsw.limit_in_bytes"
        # memsw must stay >= limit: raise whichever must move first.
        try:
            current = int((memory / "memory.limit_in_bytes").read_text())
        except (OSError, ValueError):
            current = 0
        if memsw.exists() and int(limit) > current:
            memsw.write_text(limit)
            (memory / "memory.limit_in_bytes").write_text(limit)
        else:
            (memory / "memory.limit_in_bytes").write_text(limit)
            if memsw.exists():
                memsw.write_text(limit)
        (self.path("pids", instance_id) / "pids.max").write_text(str(limits.pids_max))

    def pids(self, instance_id: str) -> list[int]:
        try:
            text = (self.path("pids", instance_id) / "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(p) for p in text.split()]

    def freeze(self, instance_id: str, timeout: float = 5.0) -> bool:
        """Stop scheduling every process of the instance; True once all are frozen."""
        return self._set_freezer(instance_id, "FROZEN", timeout)

    def thaw(self, instance_id: str, timeout: float = 5.0) -> bool:
        """Let a frozen instance's processes run again (a no-op when it is not frozen)."""
        return self._set_freezer(instance_id, "THAWED", timeout)

    def frozen(self, instance_id: str) -> bool:
        try:
            return (self.path("freezer", instance_id) / "freezer.state").read_text().strip() != "THAWED"
        except OSError:
            return False

    def _set_freezer(self, instance_id: str, target: str, timeout: float) -> bool:
        """Write `target` until `freezer.state` reads it: FREEZING settles as tasks stop."""
        state_file = self.path("freezer", instance_id) / "freezer.state"
        deadline = time.monotonic() + timeout
        while True:
            try:
                state_file.write_text(target)
                if state_file.read_text().strip() == target:
                    return True
            except FileNotFoundError:
                return target == "THAWED"
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def kill_all(self, instance_id: str, timeout: float = 5.0) -> bool:
        """SIGKILL every process in the instance's groups; True once they are gone.

        A frozen process cannot die: the group is thawed first.
        """
        self.thaw(instance_id)
        deadline = time.monotonic() + timeout
        freezer_free = True
        while time.monotonic() < deadline:
            pids = self.pids(instance_id)
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01 if freezer_free else 0.05)
        return not self.pids(instance_id)

    def remove(self, instance_id: str, timeout: float = 5.0) -> bool:
        """Remove the instance's groups, killing whatever is still in them; True once gone.

        A launch that timed out may still be running and join the groups after a
        first `kill_all`: a group that is not empty is emptied again and again until
        it can go, and a launcher that comes later finds no group to join and exits.
        """
        self.thaw(instance_id)
        deadline = time.monotonic() + timeout
        for controller in CONTROLLERS:
            path = self.path(controller, instance_id)
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        return False
                    for pid in self._procs(path):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    time.sleep(0.02)
        return True

    @staticmethod
    def _procs(group: Path) -> list[int]:
        try:
            return [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except (FileNotFoundError, ValueError):
            return []

    def instance_ids(self) -> set[str]:
        ids: set[str] = set()
        for controller in CONTROLLERS:
            base = self.root / controller / self.parent
            if base.is_dir():
                ids.update(p.name for p in base.iterdir() if p.is_dir())
        return ids

    def usage(self, instance_id: str) -> dict[str, int]:
        def read(controller: str, name: str) -> int:
            try:
                return int((self.path(controller, instance_id) / name).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return 0

        memory_bytes = read("memory", "memory.usage_in_bytes")
        return {
            "memory_bytes": memory_bytes,
            "memory_working_set_bytes": max(0, memory_bytes - self._memory_stat(instance_id, "total_inactive_file")),
            "memory_limit_bytes": read("memory", "memory.limit_in_bytes"),
            "memory_max_bytes": read("memory", "memory.max_usage_in_bytes"),
            "cpu_ns": read("cpuacct", "cpuacct.usage"),
            "pids": read("pids", "pids.current"),
            "pids_max": read("pids", "pids.max") if (self.path("pids", instance_id) / "pids.max").exists() else 0,
            "oom_kills": self._oom_kills(instance_id),
        }

    def _memory_stat(self, instance_id: str, name: str) -> int:
        """One counter of memory.stat; the working set is usage minus reclaimable inactive file cache."""
        try:
            for line in (self.path("memory", instance_id) / "memory.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == name:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def _oom_kills(self, instance_id: str) -> int:
        try:
            for line in (self.path("memory", instance_id) / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0
