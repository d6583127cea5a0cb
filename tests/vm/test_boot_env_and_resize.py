"""Boot-only environment (kept off the disk) and resize reaching the instance's cgroups."""

from __future__ import annotations

from pathlib import Path

from corral.vm import AgentClient, InstanceSpec, Limits, NamespaceDriver
from tests.vm.conftest import new_spec


async def env_of(driver: NamespaceDriver, instance_id: str, name: str) -> str:
    info = await driver.info(instance_id)
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec(f'printf %s "${{{name}-unset}}"')
    return result.stdout


async def test_boot_env_reaches_the_agent_but_never_the_state_file(driver: NamespaceDriver) -> None:
    spec: InstanceSpec = new_spec(env={"PLAIN": "on-disk"}, boot_env={"SECRET_TOKEN": "s3cr3t-value"})
    info = await driver.create(spec)
    assert await env_of(driver, info.id, "SECRET_TOKEN") == "s3cr3t-value"
    assert await env_of(driver, info.id, "PLAIN") == "on-disk"
    state = (driver.instance_dir(info.id) / "state.json").read_text()
    assert "s3cr3t-value" not in state and "on-disk" in state

    await driver.stop(info.id)
    await driver.start(info.id, boot_env={"SECRET_TOKEN": "rotated"})
    assert await env_of(driver, info.id, "SECRET_TOKEN") == "rotated"
    await driver.stop(info.id)
    await driver.start(info.id)
    assert await env_of(driver, info.id, "SECRET_TOKEN") == "unset"
    assert "rotated" not in (driver.instance_dir(info.id) / "state.json").read_text()


async def test_clone_takes_its_own_boot_env(driver: NamespaceDriver) -> None:
    source = await driver.create(new_spec(boot_env={"WHO": "source"}))
    clone = await driver.clone(source.id, new_spec(boot_env={"WHO": "clone"}))
    assert await env_of(driver, clone.id, "WHO") == "clone"
    assert await env_of(driver, source.id, "WHO") == "source"


def cgroup_value(driver: NamespaceDriver, controller: str, instance_id: str, name: str) -> int:
    return int((driver.cgroups.path(controller, instance_id) / name).read_text().split()[0])


async def test_resize_applies_new_limits_on_the_next_start(driver: NamespaceDriver) -> None:
    info = await driver.create(new_spec(limits=Limits(2, 8192, 2048)))
    assert cgroup_value(driver, "cpu", info.id, "cpu.cfs_quota_us") == 200_000
    assert cgroup_value(driver, "memory", info.id, "memory.limit_in_bytes") == 8192 * 1024 * 1024
    await driver.stop(info.id)
    assert not Path(driver.cgroups.path("cpu", info.id)).exists()  # a stopped instance has no cgroups
    resized = await driver.resize(info.id, Limits(4, 16384, 4096))
    assert resized.limits == Limits(4, 16384, 4096)
    started = await driver.start(info.id)
    assert started.limits == Limits(4, 16384, 4096)
    assert cgroup_value(driver, "cpu", info.id, "cpu.cfs_quota_us") == 400_000
    assert cgroup_value(driver, "cpu", info.id, "cpu.cfs_period_us") == 100_000
    assert cgroup_value(driver, "memory", info.id, "memory.limit_in_bytes") == 16384 * 1024 * 1024
    assert cgroup_value(driver, "pids", info.id, "pids.max") == 4096
    assert started.init_pid in driver.cgroups.pids(info.id)  # the instance runs in the resized groups


async def test_metrics_report_the_working_set(driver: NamespaceDriver) -> None:
    info = await driver.create(new_spec())
    metrics = await driver.metrics(info.id)
    assert 0 < metrics["memory_working_set_bytes"] <= metrics["memory_bytes"]
