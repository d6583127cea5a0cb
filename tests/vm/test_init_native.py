"""PID 1 of an instance is the native reaper (`corral/vm/agent/reaper.c`), and an agent
that dies comes back through the zygote (`launcher.respawn`) with everything the first
one had: its place under PID 1, its credentials, its cgroups, its boot environment;
also for an instance adopted from a control plane that died."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from corral.vm import AgentClient, InstanceInfo, NamespaceDriver
from corral.vm.agent.zygote import RESPAWN_SOCKET
from corral.vm.errors import AgentUnavailable

from .conftest import TEMPLATE_CACHE, new_spec
from .test_adopt import CHILD

KILL_AGENT = "kill -9 $(cat /proc/1/task/1/children | cut -d' ' -f1)"
STATUS_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "Gid")


def status(pid: int) -> dict[str, str]:
    """Fields of /proc/PID/status, seen from the host."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def agent_host_pid(info: InstanceInfo) -> int:
    """The host pid of the agent: PID 1's child named corral-agent."""
    assert info.init_pid
    for child in Path(f"/proc/{info.init_pid}/task/{info.init_pid}/children").read_text().split():
        if Path(f"/proc/{child}/comm").read_text().strip() == "corral-agent":
            return int(child)
    raise AssertionError("PID 1 has no agent child")


async def kill_agent_and_wait(info: InstanceInfo) -> AgentClient:
    async with AgentClient.for_instance(info) as agent:
        with pytest.raises(AgentUnavailable):
            await agent.exec(KILL_AGENT, timeout=5)
    client = AgentClient.for_instance(info)
    await client.__aenter__()
    await client.wait_ready(10)
    return client


async def test_pid1_is_the_native_reaper_and_the_tenant_cannot_look_inside(
    driver: NamespaceDriver, instance: InstanceInfo
) -> None:
    assert instance.init_pid
    exe = os.readlink(f"/proc/{instance.init_pid}/exe")
    assert Path(exe).parent == driver.data_dir / "zygote" and Path(exe).name.startswith("reaper-")
    assert os.stat(exe).st_mode & 0o777 == 0o711  # not readable by the tenant: the exec left PID 1 not dumpable
    assert Path(f"/proc/{instance.init_pid}/comm").read_text().strip() == "corral-init"
    init, agent = status(instance.init_pid), status(agent_host_pid(instance))
    assert init["NoNewPrivs"] == "1" and init["Seccomp"] == "2"
    assert {key: init[key] for key in STATUS_FIELDS} == {key: agent[key] for key in STATUS_FIELDS}
    agent_fds = Path(f"/proc/{agent_host_pid(instance)}/fd")
    targets = [os.readlink(fd) for fd in agent_fds.iterdir()]
    assert not [t for t in targets if "zygote" in t or t.startswith("/memfd:")], targets  # PID 1's own stay its own
    rss_kb = int(init["VmRSS"].split()[0])
    assert rss_kb < 1024, f"PID 1 holds {rss_kb} kB"
    async with AgentClient.for_instance(instance) as client:
        for probe in ("ls /proc/1/fd", "cat /proc/1/environ", "cat /proc/1/fd/3", "ls /proc/1/fd/4/", "head -c1 /proc/1/mem"):
            result = await client.exec(f"{probe} >/dev/null 2>&1", timeout=10)
            assert result.exit_code != 0, f"the tenant could run {probe!r}"


async def test_a_killed_agent_comes_back_twice_with_what_the_first_had(driver: NamespaceDriver) -> None:
    info = await driver.create(new_spec(boot_env={"BOOT_SECRET": "only-in-memory"}))
    assert info.init_pid
    first = status(agent_host_pid(info))
    first_cgroups = Path(f"/proc/{agent_host_pid(info)}/cgroup").read_text()
    for _ in range(2):
        client = await kill_agent_and_wait(info)
        try:
            result = await client.exec("echo \"$BOOT_SECRET\"; echo \"$(cat /proc/1/task/1/children)\"; cat /proc/self/uid_map")
            assert result.exit_code == 0
            secret, children, uid_map = result.stdout.splitlines()[:3]
            assert secret == "only-in-memory"
            assert len(children.split()) == 1  # under PID 1, as the first agent was
            assert uid_map.split()[:2] == ["0", str(int(status(info.init_pid)["Uid"].split()[0]))]
            respawned = agent_host_pid(info)
            assert {key: status(respawned)[key] for key in STATUS_FIELDS} == {key: first[key] for key in STATUS_FIELDS}
            assert Path(f"/proc/{respawned}/cgroup").read_text() == first_cgroups
            # As the first agent: the tenant cannot read its memory, fds or environment.
            denied = await client.exec(f"cat /proc/{children.split()[0]}/environ >/dev/null 2>&1")
            assert denied.exit_code != 0
        finally:
            await client.__aexit__(None, None, None)


async def test_sigterm_to_the_reaper_stops_the_instance(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    assert instance.init_pid
    async with AgentClient.for_instance(instance) as client:
        await client.exec("nohup sleep 300 >/dev/null 2>&1 &")
    pids = driver.cgroups.pids(instance.id)
    assert len(pids) >= 3
    os.kill(instance.init_pid, signal.SIGTERM)
    with trio.fail_after(5):
        while any(Path(f"/proc/{pid}").exists() and status(pid).get("State", "").split()[:1] != ["Z"] for pid in pids):
            await trio.sleep(0.05)


async def test_only_an_instance_reaper_gets_an_agent(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    """Anyone else who reaches the socket (here: a host process) is refused: no reply,
    and no process appears anywhere."""
    before = set(driver.cgroups.pids(instance.id))
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as bell:
        bell.connect(str(driver.data_dir / "zygote" / RESPAWN_SOCKET))
        bell.settimeout(5)
        try:
            bell.send(b"respawn")  # the zygote may have refused the caller (and closed) already
            answer = bell.recv(64)
        except (BrokenPipeError, ConnectionResetError):  # closed with our request unread
            answer = b""
        assert answer == b""
    assert set(driver.cgroups.pids(instance.id)) == before


async def test_the_agent_of_an_adopted_instance_comes_back(driver: NamespaceDriver) -> None:
    """The control plane that created the instance dies; a new one (another zygote) adopts
    it, and still brings its agent back."""
    code = CHILD.format(root=str(Path(__file__).parents[2]), data=str(driver.data_dir), cache=str(TEMPLATE_CACHE))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        created = json.loads(await trio.to_thread.run_sync(child.stdout.readline))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    adopted = {info.id: info for info in await driver.adopt()}[created["id"]]
    assert driver.zygote.pid is not None  # adopting running instances starts this control plane's zygote
    client = await kill_agent_and_wait(adopted)
    try:
        assert (await client.exec("cat /workspace/before.txt")).stdout == "written before the crash"
    finally:
        await client.__aexit__(None, None, None)
