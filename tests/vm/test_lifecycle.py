"""Lifecycle of real instances: create, exec, stop/start, clone, resize, destroy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

from corral.actors.runtime_errors import answer_for
from corral.vm import (
    AgentClient,
    AgentUnavailable,
    InstanceExists,
    InstanceInfo,
    InstanceNotFound,
    InstanceState,
    InvalidInstanceState,
    Limits,
    NamespaceDriver,
    RuntimeUnavailable,
    TemplateNotFound,
)

from .conftest import CGROUP_PARENT, LINK_PREFIX, NETNS_PREFIX, SUBNET, TABLE, new_spec


def nft_chains() -> str:
    return subprocess.run(["nft", "list", "table", "inet", TABLE], capture_output=True, text=True).stdout


def link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


async def test_create_exec_destroy(driver: NamespaceDriver) -> None:
    spec = new_spec(env={"GREETING": "hello"}, hostname="box-one")
    info = await driver.create(spec)
    assert info.state is InstanceState.RUNNING
    assert info.address is not None and info.address.startswith(SUBNET.rsplit(".", 1)[0] + ".")
    assert info.init_pid
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec("echo $GREETING; hostname; id -u; pwd")
        assert result.exit_code == 0
        assert result.stdout.split() == ["hello", "box-one", "0", "/workspace"]
        result = await agent.exec("echo out; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")

    directory = driver.instance_dir(info.id)
    host_link = driver.network.host_link(info.id)
    key = host_link[len(LINK_PREFIX) :]
    assert directory.is_dir() and (directory / "state.json").stat().st_mode & 0o777 == 0o600
    assert link_exists(host_link)
    assert f"inst_{key}" in nft_chains()
    assert Path(f"/sys/fs/cgroup/memory/{CGROUP_PARENT}/{info.id}").is_dir()

    await driver.destroy(info.id)
    assert not directory.exists()
    assert not link_exists(host_link)
    assert f"inst_{key}" not in nft_chains()
    assert not os.path.exists(f"/run/netns/{NETNS_PREFIX}{info.id}")
    assert not Path(f"/sys/fs/cgroup/memory/{CGROUP_PARENT}/{info.id}").exists()
    assert driver.network.addresses.lookup(info.id) is None
    assert not os.path.exists(f"/proc/{info.init_pid}") or _is_zombie(info.init_pid)
    with pytest.raises(InstanceNotFound):
        await driver.info(info.id)


def _is_zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_stop_start_keeps_files(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/notes.txt", b"kept")
        await agent.exec("pip --version > /root/pip.txt; mkdir -p /opt/app && echo 1 > /opt/app/x")
    stopped = await driver.stop(instance.id)
    assert stopped.state is InstanceState.STOPPED and stopped.address is None
    assert not os.path.exists(f"/proc/{instance.init_pid}") or _is_zombie(instance.init_pid or 0)
    with pytest.raises(RuntimeUnavailable):
        AgentClient.for_instance(stopped)
    async with AgentClient(instance.address, instance.agent_port, instance.agent_token, timeout=1) as dead:
        with pytest.raises(AgentUnavailable):
            await dead.health()

    started = await driver.start(instance.id)
    assert started.state is InstanceState.RUNNING
    assert started.address == instance.address
    async with AgentClient.for_instance(started) as agent:
        assert (await agent.read_file("/workspace/notes.txt")).data == b"kept"
        result = await agent.exec("cat /root/pip.txt /opt/app/x")
        assert "pip" in result.stdout and result.stdout.endswith("1\n")
    # start of a running instance is a no-op
    assert (await driver.start(instance.id)).init_pid == started.init_pid


async def test_clone_copies_files(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/data/file.bin", bytes(range(256)) * 100)
        await agent.exec("rm /etc/motd")  # a whiteout in the upper layer
    copy = await driver.clone(instance.id, new_spec())
    assert copy.id != instance.id and copy.address != instance.address
    async with AgentClient.for_instance(copy) as agent:
        assert (await agent.read_file("/workspace/data/file.bin")).data == bytes(range(256)) * 100
        assert (await agent.exec("test -e /etc/motd")).exit_code == 1
        await agent.write_file("/workspace/only-in-copy", b"x")
    async with AgentClient.for_instance(instance) as agent:
        assert (await agent.exec("test -e /workspace/only-in-copy")).exit_code == 1


async def test_archive(driver: NamespaceDriver, instance: InstanceInfo, tmp_path: Path) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/a.txt", b"archived")
    archive = await driver.archive(instance.id, tmp_path / "snap.tar.gz")
    listing = subprocess.run(["tar", "-tzf", str(archive)], capture_output=True, text=True).stdout
    assert "./workspace/a.txt" in listing.split()


async def test_resize_only_while_stopped(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    with pytest.raises(InvalidInstanceState):
        await driver.resize(instance.id, Limits(2, 2048, 256))
    await driver.stop(instance.id)
    resized = await driver.resize(instance.id, Limits(2, 2048, 256))
    assert resized.limits == Limits(2, 2048, 256)
    started = await driver.start(instance.id)
    limit = Path(f"/sys/fs/cgroup/memory/{CGROUP_PARENT}/{instance.id}/memory.limit_in_bytes").read_text()
    assert int(limit) == 2048 * 1024 * 1024
    quota = Path(f"/sys/fs/cgroup/cpu/{CGROUP_PARENT}/{instance.id}/cpu.cfs_quota_us").read_text()
    assert int(quota) == 200_000
    assert started.state is InstanceState.RUNNING
    metrics = await driver.metrics(instance.id)
    assert metrics["memory_bytes"] > 0 and metrics["pids"] >= 2


async def test_errors(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    with pytest.raises(TemplateNotFound) as excinfo:
        await driver.create(new_spec(template="no-such-template"))
    assert answer_for(excinfo.value) == (400, "INVALID_TEMPLATE")
    with pytest.raises(InstanceExists):
        await driver.create(new_spec(instance_id=instance.id))
    with pytest.raises(InstanceNotFound):
        await driver.info("7d8f3f40-0000-4000-8000-000000000000")
    assert [i.id for i in await driver.instances()] == [instance.id]


async def test_agent_restarts_after_being_killed(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        # The user is root inside and may kill the agent; init brings it back.
        with pytest.raises(AgentUnavailable):
            await agent.exec("kill -9 $(cat /proc/1/task/1/children | cut -d' ' -f1)", timeout=5)
    async with AgentClient.for_instance(instance) as agent:
        await agent.wait_ready(10)
        assert (await agent.exec("echo back")).stdout == "back\n"


async def test_many_concurrent_creates(driver: NamespaceDriver) -> None:
    infos: list[InstanceInfo] = []

    async def one() -> None:
        infos.append(await driver.create(new_spec()))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(one)
    assert len({i.address for i in infos}) == 5
    for info in infos:
        async with AgentClient.for_instance(info) as agent:
            assert (await agent.exec("true")).exit_code == 0


async def test_thaw_resumes_a_paused_instance_where_it_was_and_refuses_anything_else(
    driver: NamespaceDriver, instance: InstanceInfo
) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.exec("nohup sh -c 'echo $$ > /tmp/sleeper.pid; exec sleep 300' >/dev/null 2>&1 &")
        with trio.fail_after(5):
            while (await agent.exec("cat /tmp/sleeper.pid")).exit_code:
                await trio.sleep(0.05)
        pid = (await agent.exec("cat /tmp/sleeper.pid")).stdout
    assert (await driver.pause(instance.id)).state is InstanceState.PAUSED
    thawed = await driver.thaw(instance.id)
    assert thawed.state is InstanceState.RUNNING and thawed.address == instance.address
    async with AgentClient.for_instance(thawed) as agent:
        assert (await agent.exec(f"kill -0 {pid.strip()} && cat /tmp/sleeper.pid")).stdout == pid  # the same process, not a new boot
    await driver.stop(instance.id)
    with pytest.raises(InvalidInstanceState):
        await driver.thaw(instance.id)
    assert (await driver.info(instance.id)).state is InstanceState.STOPPED  # a thaw never boots it
