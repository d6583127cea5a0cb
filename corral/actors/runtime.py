"""The instance runtime of this node: template store, host network, namespace driver.

Built on first use, so a node that never runs an instance never touches the host
network; but at start a node whose data directory already holds instances builds it
at once and re-adopts them (DESIGN.md: instances survive the control plane). The
host network is the node's to make (`corral.node` plugs `corral.net` in): this
module only knows the runtime's `InstanceNetwork` interface.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import trio

from corral.config import Settings
from corral.vm import CgroupV1, InstanceNetwork, NamespaceDriver, RuntimeDriver, TemplateStore

log = logging.getLogger("corral.runtime")


class NodeNetwork(InstanceNetwork, Protocol):
    """The host network as the node owns it: set up before the first instance, closed at the end."""

    async def setup(self) -> None: ...

    def close(self) -> None: ...


class RuntimeHolder:
    def __init__(self, settings: Settings, make_network: Callable[[], NodeNetwork]) -> None:
        self.settings = settings
        self._make_network = make_network
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
                )
                adopted = await driver.adopt()
                if adopted:
                    log.info("re-adopted %d instance(s)", len(adopted))
                self._driver = driver
        return self._driver

    async def aclose(self) -> None:
        """Release the driver; instances and the host network stay for the next start."""
        if self._driver is not None:
            await self._driver.aclose()
        if self._network is not None:
            self._network.close()
