"""The runtime driver interface: what the control plane needs from any instance runtime.

The namespace driver implements it today; a Firecracker driver can implement it
later without the actors noticing: an instance is reached only through its guest
agent at `InstanceInfo.address:agent_port` with `agent_token`.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInstanceState, SnapshotNotFound

DEFAULT_DISK_MB = 10 * 1024
"""A sandbox's disk unless the operator says otherwise (`CORRAL_SANDBOX_DISK_GB`, contract §18)."""


@dataclass(frozen=True)
class Limits:
    """Resources of an instance, from its size (small = 1 vCPU, 4096 MB), and its disk."""

    vcpus: float = 1.0
    memory_mb: int = 4096
    pids_max: int = 1024
    disk_mb: int = DEFAULT_DISK_MB
    """The size of the instance's writable layer, in MiB: writing past it is ENOSPC
    inside (`corral.vm.disk`). The caller sets it by kind (contract §18)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Limits:
        disk_mb = int(data.get("disk_mb") or DEFAULT_DISK_MB)  # states written before disks have none
        return cls(float(data["vcpus"]), int(data["memory_mb"]), int(data["pids_max"]), disk_mb)


#: The specification's sizes (computer create and resize).
SIZES: dict[str, Limits] = {
    "small": Limits(vcpus=1, memory_mb=4096, pids_max=1024),
    "medium": Limits(vcpus=2, memory_mb=8192, pids_max=2048),
    "large": Limits(vcpus=4, memory_mb=16384, pids_max=4096),
}

#: The desktop sizing list's disk (GiB) of each size name: a computer's disk (contract §18).
COMPUTER_DISK_GB: dict[str, int] = {"small": 20, "medium": 50, "large": 100}


@dataclass(frozen=True)
class InstanceSpec:
    """What to create. `instance_id` is the resource's UUID and names everything on disk."""

    instance_id: str
    template: str = "default"
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None
    boot_env: dict[str, str] = field(default_factory=dict)
    """Environment for this boot only, on top of `env`: handed to the guest agent in
    memory and never written to the instance's state on disk, because its values may
    be secrets (a computer's encrypted env store)."""


class InstanceState(enum.StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    """Every process kept in memory but not scheduled (cgroup freezer)."""
    STOPPED = "stopped"


@dataclass(frozen=True)
class InstanceInfo:
    """An instance as the runtime sees it now."""

    id: str
    state: InstanceState
    template: str
    limits: Limits
    hostname: str
    address: str | None
    agent_port: int
    agent_token: str
    init_pid: int | None
    created_at: str

    @property
    def agent_url(self) -> str | None:
        return f"http://{self.address}:{self.agent_port}" if self.address else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data


class RuntimeDriver(abc.ABC):
    """Lifecycle of instances. Every method is idempotent where that makes sense."""

    @abc.abstractmethod
    async def create(self, spec: InstanceSpec) -> InstanceInfo:
        """Create the instance from its template and start it; returns it running."""

    @abc.abstractmethod
    async def start(self, instance_id: str, boot_env: dict[str, str] | None = None) -> InstanceInfo:
        """Start a stopped instance with every file it had, or thaw a paused one.

        `boot_env` is added to the instance's environment for this boot only (see
        `InstanceSpec.boot_env`); a running instance keeps the environment it has."""

    @abc.abstractmethod
    async def pause(self, instance_id: str) -> InstanceInfo:
        """Freeze a running instance with every process and its memory intact.

        `start` thaws it; `stop` and `destroy` work on a paused instance too."""

    async def thaw(self, instance_id: str) -> InstanceInfo:
        """Resume a paused instance exactly where it was frozen (what `start` does to a
        paused one, minus any chance of a fresh boot): `InvalidInstanceState` when it is
        not a live instance. A runtime without a cheaper way says so, and the caller
        uses `start`."""
        raise InvalidInstanceState("this runtime resumes paused instances through start")

    @abc.abstractmethod
    async def stop(self, instance_id: str) -> InstanceInfo:
        """Stop every process; files, address and limits are kept."""

    @abc.abstractmethod
    async def destroy(self, instance_id: str) -> None:
        """Stop and remove everything the instance had (files, network, cgroups)."""

    @abc.abstractmethod
    async def clone(self, source_id: str, spec: InstanceSpec) -> InstanceInfo:
        """A new running instance whose files are a copy of the source's."""

    @abc.abstractmethod
    async def archive(self, instance_id: str, dest: Path) -> Path:
        """A tar.gz of the instance's own files (its writable layer) at `dest`."""

    @abc.abstractmethod
    async def snapshot(self, instance_id: str, snapshot_id: str) -> int:
        """Keep a copy of the instance's own files (its writable layer) as `snapshot_id`;
        returns the copy's size in bytes.

        A running instance is frozen for the copy, so that it is consistent, and thawed
        after; a paused one stays paused; a stopped one is copied as it is."""

    @abc.abstractmethod
    async def restore(self, instance_id: str, snapshot_id: str) -> InstanceInfo:
        """Replace a stopped instance's files with the snapshot's (InvalidInstanceState
        unless stopped; SnapshotNotFound for an unknown snapshot)."""

    @abc.abstractmethod
    async def create_from_snapshot(self, snapshot_id: str, spec: InstanceSpec) -> InstanceInfo:
        """A new running instance whose files are a copy of the snapshot's (over the
        template the snapshot was taken over)."""

    @abc.abstractmethod
    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove the snapshot's files; an unknown snapshot is no error."""

    def has_snapshot(self, snapshot_id: str) -> bool:
        """Whether the snapshot's files are on this node."""
        return False

    async def export_snapshot(self, snapshot_id: str, dest: Path) -> None:
        """The snapshot as one archive at `dest`, for another node (`import_snapshot`)."""
        raise SnapshotNotFound(f"snapshot not found: {snapshot_id}")

    async def import_snapshot(self, snapshot_id: str, archive: Path) -> None:
        """Keep the snapshot another node exported (`export_snapshot`) as this node's."""
        raise SnapshotNotFound(f"snapshot not found: {snapshot_id}")

    async def save_template_layer(self, instance_id: str, template: str, layer_id: str) -> int:
        """Keep the stopped instance's own files as layer `layer_id` of template `template`
        (over the template the instance was made from) and make it that template's current
        layer; instances made from `template` then start from it. Returns its size in bytes."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep template layers")

    async def remove_template(self, template: str) -> None:
        """Remove a template made of layers (instances made from it must be gone)."""
        raise NotImplementedError(f"{type(self).__name__} cannot remove templates")

    def has_template_layer(self, template: str, layer_id: str) -> bool:
        """Whether template `template` is here with `layer_id` as its current layer."""
        return False

    def template_built(self, template: str) -> bool:
        """Whether template `template` is here, whatever its layer."""
        return False

    async def export_template_layer(self, template: str, dest: Path) -> None:
        """The template's current layer as one archive at `dest`, for another node."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep template layers")

    async def import_template_layer(self, template: str, archive: Path) -> None:
        """Keep the layer another node exported (`export_template_layer`) as the
        template's current one here."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep template layers")

    @abc.abstractmethod
    async def resize(self, instance_id: str, limits: Limits) -> InstanceInfo:
        """New limits for a stopped instance; its cgroups get them when it next starts."""

    @abc.abstractmethod
    async def info(self, instance_id: str) -> InstanceInfo:
        """The instance now (raises InstanceNotFound)."""

    @abc.abstractmethod
    async def instances(self) -> list[InstanceInfo]:
        """Every instance the runtime knows about."""

    @abc.abstractmethod
    async def adopt(self) -> list[InstanceInfo]:
        """After a restart: take over running instances, clean up half-created ones."""

    @abc.abstractmethod
    async def metrics(self, instance_id: str) -> dict[str, int]:
        """Resource usage (memory bytes, CPU ns, process count) of a running instance."""

    def host_root(self, info: InstanceInfo) -> Path | None:
        """The running instance's root directory as the host sees it, for bulk reads
        without a round trip per file through the agent; None when the runtime has no
        such view (a microVM), and callers then go through the agent. Everything under
        it belongs to the tenant: open it without following links."""
        return None

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the driver's own resources; instances keep running."""
