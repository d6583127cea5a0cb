"""A hostile root inside an instance: system calls refused, capabilities limited,
kernel files masked, and the host's files untouched by the links it leaves behind."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.vm import AgentClient, InstanceInfo, NamespaceDriver

from .conftest import new_spec

DOCKER_CAPABILITIES = 0xA80425FB
"""CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE NET_RAW
SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP: Docker's default set."""

SYSCALLS = {  # x86-64 numbers, and arguments that would succeed for a privileged caller
    "unshare(CLONE_NEWUSER)": (272, 0x10000000),
    "unshare(CLONE_NEWNS)": (272, 0x00020000),
    "io_uring_setup": (425, 8, 0),
    "keyctl": (250, 0, -3),
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "userfaultfd": (323, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "init_module": (175, 0, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "setns": (308, 0, 0),
    "fsopen": (430, 0, 0),
    "open_tree": (428, -100, 0, 0),
    "clone3": (435, 0, 0),
}

PROBE = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, (nr, *args) in json.loads(os.environ["CALLS"]).items():
    ctypes.set_errno(0)
    result = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    out[name] = ctypes.get_errno() if result == -1 else 0
print(json.dumps(out))
"""


@pytest.fixture
async def hostile(instance: InstanceInfo) -> AsyncIterator[AgentClient]:
    async with AgentClient.for_instance(instance) as client:
        yield client


async def test_dangerous_system_calls_are_refused(hostile: AgentClient) -> None:
    result = await hostile.exec(f"python3 -c '{PROBE}'", env={"CALLS": json.dumps(SYSCALLS)})
    assert result.exit_code == 0, result.stderr
    errors = json.loads(result.stdout)
    expected = {name: 1 for name in SYSCALLS}  # EPERM
    expected["clone3"] = 38  # ENOSYS: the C library falls back to clone, which is checked
    assert errors == expected
    unshare = await hostile.exec("unshare -Ur true; echo $?; unshare -m true; echo $?")
    assert unshare.stdout.split() == ["1", "1"], unshare.stdout + unshare.stderr


async def test_what_a_program_needs_still_works(hostile: AgentClient) -> None:
    script = (
        "set -e; sh -c 'echo child'; python3 -c 'import subprocess, threading, multiprocessing;"
        " print(subprocess.run([\"echo\", \"spawned\"], capture_output=True, text=True).stdout.strip())';"
        " chown nobody /tmp && chmod 700 /tmp && chown root /tmp && chmod 1777 /tmp;"
        " python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join()'"
    )
    result = await hostile.exec(script)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["child", "spawned", "thread"]


async def test_capabilities_are_dockers_default_set(hostile: AgentClient) -> None:
    result = await hostile.exec("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status")
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in result.stdout.splitlines()}
    assert caps == {"CapInh": DOCKER_CAPABILITIES, "CapPrm": DOCKER_CAPABILITIES, "CapEff": DOCKER_CAPABILITIES,
                    "CapBnd": DOCKER_CAPABILITIES, "CapAmb": 0}  # fmt: skip
    # The agent itself, and PID 1, hold no more.
    result = await hostile.exec("grep CapBnd /proc/1/status")
    assert int(result.stdout.split()[1], 16) == DOCKER_CAPABILITIES


async def test_kernel_files_are_masked_or_read_only(hostile: AgentClient) -> None:
    # Those of Docker's masked files this kernel has read as empty; its directories are empty.
    files = [path for path in ("/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kcore") if Path(path).exists()]
    dirs = [path for path in ("/proc/acpi", "/sys/firmware", "/proc/scsi") if Path(path).is_dir()]
    assert "/proc/keys" in files and "/sys/firmware" in dirs
    result = await hostile.exec(" ".join(f"wc -c < {path};" for path in files) + " ".join(f"ls -A {path} | wc -l;" for path in dirs))
    assert result.stdout.split() == ["0"] * (len(files) + len(dirs)), result.stdout + result.stderr
    result = await hostile.exec("echo 1 > /proc/sys/kernel/ns_last_pid && echo wrote; ls /proc/sys/kernel >/dev/null && echo listed")
    assert result.stdout.split() == ["listed"]
    assert "Read-only file system" in result.stderr


async def test_links_in_the_instance_never_lead_the_host_out(driver: NamespaceDriver, tmp_path: Path) -> None:
    """`/etc`, `/tmp` and `/workspace` made links to host directories, then a restart: the
    host directories stay empty, and the instance gets real ones back. (`/proc`, `/sys`
    and `/dev` are mount points while it runs: they cannot be replaced.)"""
    host = tmp_path / f"host-{uuid.uuid4().hex[:8]}"
    targets = {name: host / name for name in ("etc", "tmp", "workspace")}
    for target in targets.values():
        target.mkdir(parents=True)
    info = await driver.create(new_spec())
    async with AgentClient.for_instance(info) as agent:
        links = " && ".join(f"rm -rf /{name} && ln -s {target} /{name}" for name, target in targets.items())
        result = await agent.exec(f"cp -a /etc /etc.real && {links}")
        assert result.exit_code == 0, result.stderr
    await driver.stop(info.id)
    info = await driver.start(info.id)
    for target in targets.values():
        assert list(target.iterdir()) == []
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec("cat /etc/hostname; test -L /etc || test -L /tmp || test -L /workspace || echo real")
        assert result.stdout.split() == [f"sbx-{info.id[:8]}", "real"]


async def test_a_fork_during_a_directory_swap_copies_no_host_file(driver: NamespaceDriver, tmp_path: Path) -> None:
    """A tenant swaps a directory for a link to a host directory, as fast as it can, while
    its sandbox is forked: the fork holds the tenant's files or the link, never the host's."""
    secret = tmp_path / f"secret-{uuid.uuid4().hex[:8]}"
    secret.mkdir()
    (secret / "host-only").write_text("host data\n")
    info = await driver.create(new_spec())
    async with AgentClient.for_instance(info) as agent:
        await agent.exec("mkdir -p /workspace/d && echo mine > /workspace/d/file")
        swap = (
            "cd /workspace; while :; do mv d d.real; ln -s " + str(secret) + " d; rm d; mv d.real d; done"
            " >/dev/null 2>&1 &"
        )
        await agent.exec(swap)
        for _ in range(5):
            fork = await driver.clone(info.id, new_spec())
            upper = driver.layer_dir(fork.id) / "upper"
            assert not list(upper.rglob("host-only")), "the fork holds a host file"
            await driver.destroy(fork.id)


async def test_the_instance_sees_no_host_path(driver: NamespaceDriver, hostile: AgentClient) -> None:
    result = await hostile.exec("cat /proc/self/mountinfo /proc/1/mountinfo /proc/1/cmdline /proc/self/cgroup")
    assert result.exit_code == 0
    for host_path in (str(driver.data_dir), str(driver.templates.root), str(driver.instances_dir)):
        assert host_path not in result.stdout
    assert "lowerdir=l0," in result.stdout


async def test_each_instance_has_a_uid_range_of_its_own(driver: NamespaceDriver, tmp_path: Path) -> None:
    """Two live instances' roots are different host uids, neither the files' shared
    range; their keyrings and process limits are their own; what they write is stored
    in the shared range, so a fork, a snapshot or a template layer copies as it is."""
    first, second = await driver.create(new_spec()), await driver.create(new_spec())
    uids = []
    for info in (first, second):
        assert info.init_pid is not None
        line = next(li for li in Path(f"/proc/{info.init_pid}/status").read_text().splitlines() if li.startswith("Uid:"))
        uids.append(int(line.split()[1]))
    assert uids[0] != uids[1] and driver.uid_base not in uids
    async with AgentClient.for_instance(first) as agent:
        result = await agent.exec("id -u; echo data > /workspace/mine; stat -c %u /etc/passwd /workspace/mine")
        assert result.stdout.split() == ["0", "0", "0"]
    on_disk = driver.layer_dir(first.id) / "upper" / "workspace" / "mine"
    assert on_disk.stat().st_uid == driver.uid_base
    fork = await driver.clone(first.id, new_spec())
    async with AgentClient.for_instance(fork) as agent:
        result = await agent.exec("cat /workspace/mine; stat -c %u /workspace/mine; echo more >> /workspace/mine")
        assert result.stdout.split() == ["data", "0"], result.stderr
    # A stopped instance holds no range; a started one gets one again.
    await driver.stop(second.id)
    assert driver.uid_ranges.owned(second.id) == []
    second = await driver.start(second.id)
    assert len(driver.uid_ranges.owned(second.id)) == 1
    await driver.destroy(second.id)
    assert driver.uid_ranges.owned(second.id) == []


async def test_root_serves_on_a_low_port(hostile: AgentClient) -> None:
    result = await hostile.exec("python3 -c 'import socket; s = socket.socket(); s.bind((\"0.0.0.0\", 80)); print(\"bound\")'")
    assert result.stdout.strip() == "bound", result.stderr


async def test_commands_get_default_signal_dispositions(driver: NamespaceDriver) -> None:
    """Whatever the control plane ignores (a server started in the background ignores
    SIGINT and SIGQUIT, and its zygote inherits that), a command in the instance ignores
    nothing."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGQUIT)}
    try:
        info = await driver.create(new_spec())  # the test's driver starts its zygote here
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec("grep SigIgn /proc/self/status")
    assert int(result.stdout.split()[1], 16) == 0, result.stdout
