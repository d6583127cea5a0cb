"""Instance disks at the driver (corral.vm.disk): a reboot, a restore cut short, a
resize that does not fit. The hostile-tenant side is tests/security/test_disk.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.vm import (
    AgentClient,
    InstanceSpec,
    InvalidInstanceState,
    Limits,
    NamespaceDriver,
    TemplateStore,
)
from corral.vm.disk import unmount

from .conftest import make_driver, new_spec

MIB = 1024 * 1024


def small(**kwargs: object) -> InstanceSpec:
    return new_spec(limits=Limits(1, 1024, 512, 64), **kwargs)


async def df_size(info: object) -> int:
    async with AgentClient.for_instance(info) as agent:  # type: ignore[arg-type]
        result = await agent.exec("df -B1 --output=size / | tail -1")
    assert result.exit_code == 0, result
    return int(result.stdout.split()[-1])


async def test_a_reboot_mounts_the_disks_again(driver: NamespaceDriver, template_store: TemplateStore) -> None:
    info = await driver.create(small())
    async with AgentClient.for_instance(info) as agent:
        await agent.write_file("/workspace/kept.txt", b"kept")
    await driver.stop(info.id)
    directory = driver.instance_dir(info.id)
    unmount(directory / "disk")  # what a reboot leaves: the image, no mount
    assert not os.path.ismount(directory / "disk")
    again = make_driver(driver.data_dir, template_store)
    try:
        await again.adopt()
        assert os.path.ismount(directory / "disk")
        started = await again.start(info.id)
        assert await df_size(started) == 64 * MIB
        async with AgentClient.for_instance(started) as agent:
            assert (await agent.read_file("/workspace/kept.txt")).data == b"kept"
    finally:
        await again.aclose()


async def test_a_restore_cut_short_leaves_the_old_disk(driver: NamespaceDriver, template_store: TemplateStore) -> None:
    info = await driver.create(small())
    async with AgentClient.for_instance(info) as agent:
        await agent.write_file("/workspace/old.txt", b"old")
    await driver.stop(info.id)
    directory = driver.instance_dir(info.id)
    # A new disk made and filled, not yet committed, when the control plane died.
    spare = await driver.disks._take(64)
    driver.disks._place(spare, directory / "disk.next.img", directory / "disk.next")
    (directory / "disk.next" / "upper" / "new.txt").write_text("new")
    again = make_driver(driver.data_dir, template_store)
    try:
        await again.adopt()
        assert sorted(os.listdir(directory)) == ["console.log", "disk", "disk.img", "merged", "state.json"]
        started = await again.start(info.id)
        async with AgentClient.for_instance(started) as agent:
            assert (await agent.read_file("/workspace/old.txt")).data == b"old"
            assert (await agent.exec("test -e /new.txt")).exit_code == 1
    finally:
        await again.aclose()


async def test_a_disk_shrinks_only_when_the_files_fit(driver: NamespaceDriver) -> None:
    info = await driver.create(small())
    async with AgentClient.for_instance(info) as agent:
        assert (await agent.exec("head -c 40M /dev/urandom > /workspace/big")).exit_code == 0
    await driver.stop(info.id)
    with pytest.raises(InvalidInstanceState, match="do not fit"):
        await driver.resize(info.id, Limits(1, 1024, 512, 32))
    assert (await driver.info(info.id)).limits.disk_mb == 64
    resized = await driver.resize(info.id, Limits(1, 1024, 512, 128))
    assert resized.limits.disk_mb == 128
    started = await driver.start(info.id)
    assert await df_size(started) == 128 * MIB
    async with AgentClient.for_instance(started) as agent:
        assert (await agent.exec("stat -c %s /workspace/big")).stdout == f"{40 * MIB}\n"
        assert (await agent.exec("rm /workspace/big")).exit_code == 0
    await driver.stop(info.id)
    await driver.resize(info.id, Limits(1, 1024, 512, 32))
    assert await df_size(await driver.start(info.id)) == 32 * MIB
    assert Path(driver.instance_dir(info.id) / "disk.img").stat().st_size == 32 * MIB
