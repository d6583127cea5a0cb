"""The instance runtime of this node: template store, host network, namespace driver.

Built on first use, so a node that never runs an instance never touches the host
network; but at start a node whose data directory already holds instances builds it
at once and re-adopts them (DESIGN.md: instances survive the control plane). The
host network is the node's to make (`corral.node` plugs `corral.net` in): this
module only knows the runtime's `InstanceNetwork` interface.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import trio

from corral.config import Settings
from corral.errors import ApiError
from corral.net import NetworkPolicy
from corral.vm import (
    COMPUTER_DISK_GB,
    CgroupV1,
    EgressTrust,
    InstanceNetwork,
    NamespaceDriver,
    RuntimeDriver,
    TemplateStore,
)
from corral.vm.disk import free_bytes

log = logging.getLogger("corral.runtime")

GIB = 1024**3


def disk_mb(gb: float) -> int:
    """MiB of a disk of `gb` GiB (fractions allowed)."""
    return round(gb * 1024)


def sandbox_disk_gb(settings: Settings) -> float:
    """GiB of a sandbox's writable layer (also a deployment service's and a template
    build's): `CORRAL_SANDBOX_DISK_GB` (contract §18)."""
    return settings.sandbox_disk_gb


def computer_disk_gb(settings: Settings, size: str) -> float:
    """GiB of a computer's writable layer: the desktop sizing list's disk of its size,
    unless `CORRAL_COMPUTER_DISK_GB` says otherwise (contract §18)."""
    if settings.computer_disk_gb is not None:
        return settings.computer_disk_gb
    return COMPUTER_DISK_GB.get(size, max(COMPUTER_DISK_GB.values()))


def database_disk_gb(settings: Settings, size: str) -> float:
    """GiB of a database server's disk: its size's, as a computer's, unless
    `CORRAL_DATABASE_DISK_GB` says otherwise (docs/api.md "Disks")."""
    if settings.database_disk_gb is not None:
        return settings.database_disk_gb
    return COMPUTER_DISK_GB.get(size, max(COMPUTER_DISK_GB.values()))


def memory_available_mb() -> int:
    """`MemAvailable` of /proc/meminfo, in MiB."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def memory_total_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)


def reserve_bytes(settings: Settings) -> int:
    return round(settings.disk_reserve_gb * GIB)


def require_disk_reserve(settings: Settings) -> None:
    """`503 SERVICE_UNAVAILABLE` while the node's data directory has less free space than
    `CORRAL_DISK_RESERVE_GB`: no new instance then (contract §18)."""
    reserve = reserve_bytes(settings)
    data_dir = Path(settings.data_dir)
    probe = data_dir if data_dir.exists() else data_dir.parent
    if reserve and free_bytes(probe) < reserve:
        log.warning("refusing a new instance: %s has less than %s GiB free", data_dir, settings.disk_reserve_gb)
        raise ApiError(503, "SERVICE_UNAVAILABLE", "node disk reserve reached")


class NodeNetwork(InstanceNetwork, Protocol):
    """The host network as the node owns it: set up before the first instance, closed at the end."""

    async def setup(self) -> None: ...

    def close(self) -> None: ...

    async def apply_policy(self, instance_id: str, policy: NetworkPolicy) -> bool: ...

    def forget_policy(self, instance_id: str) -> None: ...

    def instance_at(self, address: str) -> str | None: ...

    def allows(self, source: str, destination: str, port: int, protocol: str = "tcp") -> bool: ...


class RuntimeHolder:
    def __init__(
        self, settings: Settings, make_network: Callable[[], NodeNetwork], egress: EgressTrust | None = None
    ) -> None:
        self.settings = settings
        self._make_network = make_network
        self.egress = egress
        """The node's egress proxy port and CA, which every instance uses from boot (None: no proxy)."""
        self._driver: RuntimeDriver | None = None
        self._network: NodeNetwork | None = None
        self._lock = trio.Lock()
        assert settings.template_dir is not None
        self.templates = TemplateStore(Path(settings.template_dir))

    @property
    def instances_dir(self) -> Path:
        return Path(self.settings.data_dir) / "instances"

    def has_instances(self) -> bool:
        return self.instances_dir.is_dir() and any(self.instances_dir.iterdir())

    def holds(self, instance_id: str) -> bool:
        """Whether this node's runtime has the instance (its directory), read without
        starting the runtime: another node's instance is not, and its actor must not be
        activated here (it would find no instance and mark it failed)."""
        return (self.instances_dir / instance_id).is_dir()

    @property
    def started_driver(self) -> RuntimeDriver | None:
        """The driver if one was made (None before the first instance): for readers that
        must not start the runtime, such as the metrics."""
        return self._driver

    async def driver(self) -> RuntimeDriver:
        if self._driver is not None:
            return self._driver
        async with self._lock:
            if self._driver is None:
                settings = self.settings
                network = self._make_network()
                await network.setup()
                self._network = network
                driver = NamespaceDriver(
                    Path(settings.data_dir),
                    self.templates,
                    network,
                    CgroupV1(parent=settings.cgroup_parent),
                    launch_timeout=settings.instance_launch_timeout,
                    egress=self.egress,
                    disk_mb=disk_mb(settings.sandbox_disk_gb),
                    disk_reserve_bytes=reserve_bytes(settings),
                )
                adopted = await driver.adopt()
                if adopted:
                    log.info("re-adopted %d instance(s)", len(adopted))
                self._driver = driver
        return self._driver

    async def apply_network_policy(self, instance_id: str, policy: NetworkPolicy) -> None:
        """The instance's network policy, in its chain now if it runs, else at its next start."""
        await self.driver()
        assert self._network is not None
        await self._network.apply_policy(instance_id, policy)

    def instance_at(self, address: str) -> str | None:
        """The instance at `address` on the bridge (None before the network is up, or for no one)."""
        return None if self._network is None else self._network.instance_at(address)

    def network_allows(self, source: str, destination: str, port: int) -> bool:
        """Whether the network policy of the instance at `source` lets it reach destination:port."""
        return self._network is None or self._network.allows(source, destination, port)

    async def forget_network_policy(self, instance_id: str) -> None:
        """The instance is gone: its policy too."""
        if self._network is not None:
            self._network.forget_policy(instance_id)

    async def prepare_template(self, name: str = "default") -> None:
        """Build template `name` now if it is not built, so that the first sandbox does
        not wait for it (a first start's mmdebstrap takes about 30 s). Creations that
        come meanwhile wait on the store's build lock. Abandoned at shutdown: a node
        stopped mid-build builds again at its next start."""
        if self.templates.is_built(name):
            return
        log.info(
            "building the %r template in the background (first start, 30 to 90 s);"
            " instances created meanwhile start when it is ready",
            name,
        )
        try:
            await trio.to_thread.run_sync(
                self.templates.ensure_sync, name, lambda line: log.debug("template %s: %s", name, line),
                abandon_on_cancel=True,
            )
        except Exception as exc:  # the first create reports it again, with its own error
            log.error("could not build the %r template: %s", name, exc)
            return
        log.info("the %r template is ready", name)

    async def prepare_templates(self, names: tuple[str, ...] = ("default", "desktop")) -> None:
        """`prepare_template` for each of `names` in turn: sandboxes' first, then desktops';
        first, what builds a stopped node abandoned is removed, whether or not the
        templates are built now."""
        removed = await trio.to_thread.run_sync(self.templates.remove_abandoned_builds)
        if removed:
            log.info("removed %d abandoned template build(s): %s", len(removed), ", ".join(map(str, removed)))
        for name in names:
            await self.prepare_template(name)

    async def aclose(self) -> None:
        """Release the driver; instances and the host network stay for the next start."""
        if self._driver is not None:
            await self._driver.aclose()
        if self._network is not None:
            self._network.close()
