"""Fixtures for runtime tests: real namespaces, a test bridge, a test nftables table.

Everything the tests create is named apart from a running server's (bridge
`corralt0`, range 10.213.0.0/24, table `corral_test`, veths `ct*`, netns
`corralt-*`, cgroups `corral-test/`) and removed at the end of the session, also
after failures; `CORRAL_TEST_SLOT` moves them (tests/support.py). The template is built once per machine into
$CORRAL_TEMPLATE_CACHE (default /var/cache/corral/templates) and reused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from corral.net import HostNetwork, NetworkConfig
from corral.vm import (
    AgentClient,
    CgroupV1,
    InstanceInfo,
    InstanceSpec,
    Limits,
    NamespaceDriver,
    TemplateStore,
)
from tests.support import TEMPLATE_CACHE, cleanup_host, host_names

_NAMES = host_names(
    bridge="corralt0",
    subnet_prefix="10.213",
    nft_table="corral_test",
    link_letter="t",
    netns_prefix="corralt",
    cgroup_parent="corral-test",
)
BRIDGE = _NAMES["bridge"]
SUBNET = _NAMES["subnet"]
TABLE = _NAMES["nft_table"]
LINK_PREFIX = _NAMES["link_prefix"]
NETNS_PREFIX = _NAMES["netns_prefix"]
CGROUP_PARENT = _NAMES["cgroup_parent"]


def _cleanup_host() -> None:
    cleanup_host(
        bridge=BRIDGE, link_prefix=LINK_PREFIX, netns_prefix=NETNS_PREFIX, nft_table=TABLE, cgroup_parent=CGROUP_PARENT
    )


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("runtime tests need root (tools/test runs as root)")
    _cleanup_host()
    root = tmp_path_factory.mktemp("corral-runtime")
    yield root
    _cleanup_host()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_store(data_root: Path) -> TemplateStore:
    store = TemplateStore(TEMPLATE_CACHE)
    store.ensure_sync("default", progress=lambda line: None)
    return store


def make_network(data_dir: Path) -> HostNetwork:
    return HostNetwork(
        NetworkConfig(
            state_dir=data_dir,
            bridge=BRIDGE,
            subnet=SUBNET,
            nft_table=TABLE,
            link_prefix=LINK_PREFIX,
            netns_prefix=NETNS_PREFIX,
        )
    )


def make_driver(data_dir: Path, templates: TemplateStore) -> NamespaceDriver:
    return NamespaceDriver(data_dir, templates, make_network(data_dir), CgroupV1(parent=CGROUP_PARENT))


@pytest.fixture
async def driver(data_root: Path, template_store: TemplateStore) -> AsyncIterator[NamespaceDriver]:
    drv = make_driver(data_root / "data", template_store)
    await drv.network.setup()
    try:
        yield drv
    finally:
        for info in await drv.instances():
            with contextlib.suppress(Exception):
                await drv.destroy(info.id)
        await drv.aclose()
        drv.network.close()


def new_spec(**kwargs: object) -> InstanceSpec:
    values: dict[str, object] = {"instance_id": str(uuid.uuid4()), "limits": Limits(1, 1024, 512)}
    values.update(kwargs)
    return InstanceSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
async def instance(driver: NamespaceDriver) -> InstanceInfo:
    return await driver.create(new_spec())


@pytest.fixture
async def agent(instance: InstanceInfo) -> AsyncIterator[AgentClient]:
    async with AgentClient.for_instance(instance) as client:
        yield client
