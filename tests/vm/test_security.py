"""Isolation, tested for real from inside instances."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import trio

from corral.vm import AgentClient, InstanceInfo, Limits, NamespaceDriver, PathForbidden

from .conftest import new_spec

pytestmark = pytest.mark.slow


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


async def test_processes_of_host_and_others_invisible(driver: NamespaceDriver, agent: AgentClient) -> None:
    result = await agent.exec("ps -e -o pid=,comm=")
    pids = [int(line.split()[0]) for line in result.stdout.splitlines()]
    assert max(pids) < 100, result.stdout  # only the instance's own, freshly numbered processes
    assert 1 in pids
    cmdline = (await agent.exec("tr '\\0' ' ' < /proc/1/cmdline")).stdout
    assert cmdline.strip() == "corral-init"  # no host paths from the zygote's command line
    assert "pytest" not in result.stdout and "python" not in result.stdout


async def test_host_files_invisible(agent: AgentClient, tmp_path: Path) -> None:
    marker = f"/tmp/corral-host-marker-{uuid.uuid4()}"
    Path(marker).write_text("host secret")
    try:
        assert (await agent.exec(f"test -e {marker}")).exit_code == 1
        assert (await agent.exec("test -e /work || test -e /var/cache/corral")).exit_code == 1
        result = await agent.exec("cat /proc/1/environ | tr '\\0' '\\n'")
        assert "CORRAL" not in result.stdout
        # Kernel interfaces that would reach the host are closed.
        assert (await agent.exec("echo b > /proc/sysrq-trigger")).exit_code != 0
        assert (await agent.exec("head -c1 /proc/kcore")).exit_code != 0
        assert (await agent.exec("echo 1 > /proc/sys/kernel/panic")).exit_code != 0
    finally:
        os.unlink(marker)


async def test_mount_and_modules_and_hostname_fail(agent: AgentClient) -> None:
    result = await agent.exec("mount -t tmpfs none /mnt")
    assert result.exit_code != 0 and "permission denied" in result.stderr.lower()
    assert (await agent.exec("mount --bind /tmp /mnt")).exit_code != 0
    assert (await agent.exec("umount /proc")).exit_code != 0
    load = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "r = libc.syscall(175, None, 0, b''); print(r, ctypes.get_errno())"  # init_module
    )
    result = await agent.exec(f'python3 -c "{load}"')
    # EPERM; ENOSYS on kernels built without module support (this machine's).
    assert result.stdout.split()[0] == "-1" and result.stdout.split()[1] in ("1", "38")
    assert (await agent.exec("echo /tmp/x > /proc/sys/kernel/modprobe")).exit_code != 0
    assert (await agent.exec("hostname evil")).exit_code != 0
    assert (await agent.exec("ip addr add 10.213.9.250/24 dev eth0")).exit_code != 0
    assert (await agent.exec("ip link set eth0 address 02:00:00:00:00:01")).exit_code != 0


async def test_raw_sockets_fail(agent: AgentClient) -> None:
    for family, kind in (("AF_INET", "SOCK_RAW, socket.IPPROTO_ICMP"), ("AF_PACKET", "SOCK_RAW, 0")):
        code = f"import socket; socket.socket(socket.{family}, socket.{kind})"
        result = await agent.exec(f'python3 -c "{code}"')
        assert result.exit_code != 0 and "PermissionError" in result.stderr, result.stderr


async def test_credentials_outside(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    assert instance.init_pid is not None
    pid = instance.init_pid
    host_uid = int(status_field(pid, "Uid").split()[0])
    assert host_uid == driver._load(instance.id)["host_uid_base"]  # its own range, not the files' shared one
    assert host_uid != driver.uid_base
    assert status_field(pid, "NoNewPrivs") == "1"
    assert os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    # The instance's root owns its files, and the template's files inside.
    async with AgentClient.for_instance(instance) as agent:
        assert (await agent.exec("stat -c %U /etc/passwd /usr/local; touch /usr/local/x")).exit_code == 0


async def test_other_instances_and_host_unreachable(driver: NamespaceDriver, agent: AgentClient) -> None:
    other = await driver.create(new_spec())
    assert other.address is not None
    async with AgentClient.for_instance(other) as other_agent:
        await other_agent.spawn("python3 -m http.server 8000 --bind 0.0.0.0", cwd="/tmp")
        # The host (control plane) reaches it...
        for _ in range(100):
            try:
                socket.create_connection((other.address, 8000), timeout=0.5).close()
                break
            except OSError:
                await trio.sleep(0.05)
        else:
            pytest.fail("http.server in the other instance never came up")

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    host_port = listener.getsockname()[1]
    host_ip = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    probe = (
        "import socket, sys\n"
        "ok = []\n"
        "for host, port in [(a, int(p)) for a, p in (x.split(':') for x in sys.argv[1:])]:\n"
        "    s = socket.socket(); s.settimeout(1)\n"
        "    try:\n"
        "        s.connect((host, port)); ok.append(f'{host}:{port}')\n"
        "    except OSError:\n"
        "        pass\n"
        "print('reached', *ok)\n"
    )
    await agent.write_file("/tmp/probe.py", probe.encode())
    targets = [
        f"{other.address}:8000",
        f"{other.address}:{other.agent_port}",
        f"{driver.network.gateway}:{host_port}",
        f"{host_ip}:{host_port}",
        f"{driver.network.gateway}:22",
    ]
    try:
        result = await agent.exec("python3 /tmp/probe.py " + " ".join(targets), timeout=20)
    finally:
        listener.close()
    assert result.stdout.strip() == "reached", result.stdout + result.stderr


async def test_agent_port_only_for_root_on_host(instance: InstanceInfo) -> None:
    connect = f"exec 3<>/dev/tcp/{instance.address}/{instance.agent_port}"
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash", "-c", connect]
    result = subprocess.run(nobody, capture_output=True, text=True, timeout=10)
    assert result.returncode != 0 and "refused" in result.stderr, result.stderr
    as_root = subprocess.run(["/bin/bash", "-c", connect], capture_output=True, text=True, timeout=10)
    assert as_root.returncode == 0, as_root.stderr


async def test_symlink_escape_refused(agent: AgentClient) -> None:
    await agent.exec(
        "ln -s /etc/passwd /workspace/pw; ln -s /etc /workspace/etcdir; ln -s / /tmp/root;"
        " ln -s /proc/1/root /workspace/init-root; ln -s /proc/self/root /workspace/own-root"
    )
    escapes = ("/workspace/pw", "/workspace/etcdir/passwd", "/tmp/root/etc/shadow", "/workspace/../etc/passwd", "/etc/passwd")
    # Magic links: PID 1's root cannot even be read (it is not dumpable), and a
    # process's own root is the instance's `/`: both are refused as paths outside.
    magic = ("/workspace/init-root/etc/hostname", "/workspace/own-root/etc/passwd", "/workspace/init-root")
    for path in escapes + magic:
        with pytest.raises(PathForbidden):
            await agent.read_file(path)
    with pytest.raises(PathForbidden):
        await agent.write_file("/workspace/etcdir/evil", b"x")
    with pytest.raises(PathForbidden):
        await agent.list_files("/workspace/etcdir")
    with pytest.raises(PathForbidden):
        await agent.chmod("/workspace/pw", "777")
    assert (await agent.exec("stat -c %a /etc/passwd")).stdout.strip() == "644"


async def test_memory_limit_kills_hog(driver: NamespaceDriver) -> None:
    info = await driver.create(new_spec(limits=Limits(1, 64, 256)))
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec("python3 -c \"b = b'x' * (200 * 1024 * 1024); print('survived')\"", timeout=60)
        assert result.exit_code == 137 and "survived" not in result.stdout
        assert (await driver.metrics(info.id))["oom_kills"] >= 1
        assert (await agent.exec("echo alive")).stdout == "alive\n"


async def test_fork_bomb_contained(driver: NamespaceDriver) -> None:
    info = await driver.create(new_spec(limits=Limits(1, 512, 64)))
    async with AgentClient.for_instance(info) as agent:
        started = time.monotonic()
        result = await agent.exec("bomb() { bomb | bomb & }; bomb; sleep 5", timeout=3)
        # The process cap shows either way: the shell is killed at its timeout while the
        # bomb is held at the cap, or the cap refuses the shell's own forks first.
        assert result.timed_out or "Cannot fork" in result.stderr, result
        host = time.monotonic()
        subprocess.run(["true"], check=True)
        assert time.monotonic() - host < 1.0
        assert (await driver.metrics(info.id))["pids"] <= 64
        # The instance recovers once the bomb is gone.
        await driver.stop(info.id)
        info = await driver.start(info.id)
    async with AgentClient.for_instance(info) as agent:
        assert (await agent.exec("echo ok")).stdout == "ok\n"
    assert time.monotonic() - started < 30
