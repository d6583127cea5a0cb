"""The control plane dies (kill -9); its instances live on and are re-adopted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import trio

from corral.vm import AgentClient, CgroupLimits, InstanceState, NamespaceDriver, TemplateStore

from .conftest import CGROUP_PARENT, NETNS_PREFIX, TEMPLATE_CACHE, make_driver, new_spec

CHILD = textwrap.dedent(
    """
    import json, os, sys, trio
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from tests.vm.conftest import make_driver
    from corral.vm import AgentClient, TemplateStore
    from tests.vm.conftest import new_spec

    async def main():
        driver = make_driver(Path({data!r}), TemplateStore(Path({cache!r})))
        info = await driver.create(new_spec())
        async with AgentClient.for_instance(info) as agent:
            await agent.write_file("/workspace/before.txt", b"written before the crash")
            await agent.spawn("sleep 1000", name="survivor", process_id="proc_survivor")
        print(json.dumps({{"id": info.id, "init_pid": info.init_pid}}), flush=True)
        await trio.sleep(1000)

    trio.run(main)
    """
)


async def test_instances_survive_kill_9_and_are_adopted(driver: NamespaceDriver, data_root: Path) -> None:
    data = driver.data_dir
    code = CHILD.format(root=str(Path(__file__).parents[2]), data=str(data), cache=str(TEMPLATE_CACHE))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        created = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert os.path.exists(f"/proc/{created['init_pid']}")

    infos = await driver.adopt()
    adopted = {info.id: info for info in infos}[created["id"]]
    assert adopted.state is InstanceState.RUNNING and adopted.init_pid == created["init_pid"]
    async with AgentClient.for_instance(adopted) as agent:
        assert (await agent.read_file("/workspace/before.txt")).data == b"written before the crash"
        assert (await agent.process("proc_survivor"))["status"] == "running"
        assert (await agent.exec("echo still here")).stdout == "still here\n"
    await driver.destroy(created["id"])


async def test_adopt_cleans_half_created_and_stale_pieces(driver: NamespaceDriver) -> None:
    # An instance caught in the middle of creation: state file, network, cgroup.
    half = str(uuid.uuid4())
    directory = driver.instance_dir(half)
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps({"id": half, "status": "creating", "token": "t", "template": "default"}))
    await driver.network.attach(half)
    driver.cgroups.create(half, CgroupLimits(1, 128, 16))
    # Network pieces and a cgroup of an instance nobody knows about any more.
    orphan = str(uuid.uuid4())
    await driver.network.attach(orphan)
    driver.cgroups.create(orphan, CgroupLimits(1, 128, 16))
    # A stopped instance whose init died behind our back stays known, as stopped.
    survivor = await driver.create(new_spec())
    assert survivor.init_pid is not None
    os.kill(survivor.init_pid, signal.SIGKILL)
    await trio.sleep(0.2)

    infos = await driver.adopt()
    assert [(i.id, i.state) for i in infos] == [(survivor.id, InstanceState.STOPPED)]
    assert not directory.exists()
    for gone in (half, orphan):
        assert not os.path.exists(f"/run/netns/{NETNS_PREFIX}{gone}")
        assert not os.path.exists(f"/sys/class/net/{driver.network.host_link(gone)}")
        assert not Path(f"/sys/fs/cgroup/pids/{CGROUP_PARENT}/{gone}").exists()
        assert driver.network.addresses.lookup(gone) is None
    chains = subprocess.run(["nft", "list", "table", "inet", "corral_test"], capture_output=True, text=True).stdout
    assert driver.network.host_link(orphan)[2:] not in chains
    restarted = await driver.start(survivor.id)
    async with AgentClient.for_instance(restarted) as agent:
        assert (await agent.exec("true")).exit_code == 0


async def test_second_driver_on_same_data_dir_sees_instances(
    driver: NamespaceDriver, template_store: TemplateStore
) -> None:
    info = await driver.create(new_spec())
    other = make_driver(driver.data_dir, template_store)
    try:
        seen = await other.info(info.id)
        assert seen.state is InstanceState.RUNNING and seen.agent_token == info.agent_token
    finally:
        await other.aclose()
        other.network.close()
