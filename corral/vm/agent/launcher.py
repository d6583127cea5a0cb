"""Turning a forked copy of the zygote into a running, isolated instance.

Order matters, and is chosen so that the instance's root user ends up with no power
over anything but its own files and processes:

1. As real root on the host: join the instance's cgroups and its (prepared) network
   namespace, then unshare UTS, IPC, PID and cgroup namespaces (and, in PID 1,
   the mount namespace). These are
   owned by the host's user namespace, so nothing inside can later mount, change
   the hostname, or reconfigure the network.
2. Fork: the child is PID 1 of the new PID namespace. Still real root, it mounts the
   overlay root (template lower + per-instance upper), turns its mount points back
   into real directories (the tenant may have left links there), mounts /proc, /sys
   (read-only) with Docker's masked and read-only paths, /dev, and pivots into the
   new root; only then does it write /etc/resolv.conf, /etc/hosts, /etc/hostname and
   the CA, so no path it writes can lead out of the instance.
3. PID 1 unshares a user namespace; the parent (still real root outside) writes its
   uid/gid maps (0 inside -> the instance's own host range outside, which no other
   live instance shares: its layers are idmapped mounts, see `_mount_root`), and PID 1 becomes uid 0 of that
   namespace with `no_new_privs`, Docker's default capabilities (nothing more, for
   it and everything it runs) and the seccomp filter of `corral.vm.seccomp_profile`.
   Changing credentials also makes PID 1 and the agent non-dumpable, so their
   memory, fds and environment cannot be read from inside.
4. PID 1 forks the agent and becomes a reaper: SIGTERM stops the instance (everything
   in the PID namespace ends with it), and an agent that dies is started again.
   When the zygote has a native reaper (`reaper.c`) and a respawn directory, PID 1
   execs that reaper (from a descriptor opened before `pivot_root`) and holds no
   Python at all: a Python PID 1 cost each idle instance about 1.3 MB, the pages its
   fork chain dirtied that the agent wrote again. The reaper then asks the zygote for
   a new agent (`respawn`): a child of the zygote enters the instance's namespaces,
   takes the same credentials, capabilities and seccomp filter, and forks the agent
   into its PID namespace. What the agent needs (address, port, token, hostname,
   environment, seccomp) waits in a sealed memfd on the reaper's fd 3, which the
   zygote reads with `pidfd_getfd`; no path or cgroup is taken from it. The first
   agent reports ready only once the reaper is in place (it closes fd 5, the gate).
   Without the native reaper, PID 1 stays a Python reaper that restarts the agent
   itself.

The launcher reports on `report_fd`, one stage at a time: `{"namespaces"}` from the
outer process once it has joined the cgroups and namespaces, `{"root"}` from PID 1
once it has entered its root file system, `{"init_pid"}` from the outer process once
the user namespace is mapped, then `{"ready"}` from the agent once its port is open;
or `{"error"}` at any point. The zygote's deadline restarts with each stage.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any, NoReturn

import trio

from . import syscalls as sc
from .app import AgentConfig, run

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
MOUNT_POINTS = ("proc", "sys", "dev", "workspace", "etc", "tmp")
MASKED = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
    "/sys/devices/virtual/block",
)  # fmt: skip
"""Docker's masked paths: an empty directory or an empty file in their place; and the
node's loop devices (`/sys/block/loop*` lead there), whose `loop/backing_file` names
the host path of every instance's disk image (`corral.vm.disk`)."""
READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
"""Docker's read-only paths."""
CAPABILITIES = {0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31}
"""Docker's default set, inside the user namespace: CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD,
AUDIT_WRITE, SETFCAP."""
SHUTDOWN_GRACE = 3.0
REAPER_TITLE = "corral-init"
AGENT_FIELDS = ("address", "agent_port", "token", "hostname", "env", "seccomp")
"""What a respawned agent is given (from the reaper's memfd); nothing else is read there."""
LAUNCH_FD = 3
"""The reaper's sealed memfd holding `AGENT_FIELDS`."""
BELL_FD = 4
"""The reaper's `O_PATH` descriptor of the zygote's respawn directory (`respawn.sock`)."""
GATE_FD = 5
"""The write end of a pipe the first agent reads to its end before it reports ready:
the reaper closes it once in place, so a ready instance has its native PID 1."""
SYS_PIDFD_GETFD = 438  # x86_64
MAX_LAUNCH_FIELDS = 4 << 20


_libc = ctypes.CDLL(None, use_errno=True)


def fork() -> int:
    """fork(2) without Python's at-fork handlers; for the zygote and its descendants only.

    `os.fork` runs `threading`'s, `random`'s and `logging`'s handlers in the child,
    which touch objects all over the heap the zygote shares: each instance process
    copied about 600 KB of it for nothing. These processes have a single thread (the
    zygote starts none), so there are no other threads' locks or idents to reset; the
    module-level `random` generator is left as it was (nothing here draws secrets from it:
    they come from `secrets`, that is `os.urandom`).
    """
    pid = int(_libc.fork())
    if pid < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"fork: {os.strerror(errno)}")
    return pid


def report(fd: int, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(message).encode() + b"\n")


def write_file(path: str, text: str, uid: int, mode: int = 0o644) -> None:
    if os.path.islink(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode())
        os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


def launch(req: dict[str, Any], report_fd: int, channel: int | None = None) -> None:
    """Runs in the detached grandchild of the zygote; never returns. `channel` brings,
    in this order, what is made while the launch starts: the id-mapping namespace
    (`needs_idmap`, made by the zygote's waiter, see `send_idmap`), and the network
    namespace when the request names none (made by the control plane meanwhile)."""
    try:
        _outer(req, report_fd, channel)
    except BaseException as exc:
        report(report_fd, {"error": f"launch failed: {exc!r}", "traceback": traceback.format_exc(limit=4)})
    os._exit(1)


def _plain_process(log_fd: int, kept: list[int]) -> None:
    """Standard input from /dev/null, output to the instance's log, no descriptor but
    `kept`, the minimal environment and default signal dispositions."""
    null_fd = os.open("/dev/null", os.O_RDWR)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    kept = sorted(kept)
    for low, high in zip([3] + [fd + 1 for fd in kept], [*kept, 65536], strict=True):
        os.closerange(low, high)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
    # Nothing of the control plane's signal dispositions reaches the instance (a server
    # started in the background ignores SIGINT and SIGQUIT, which its commands would
    # inherit through fork and exec).
    for signum in signal.valid_signals():
        if signal.getsignal(signum) == signal.SIG_IGN:  # a handler does not survive exec; this does
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _outer(req: dict[str, Any], report_fd: int, channel: int | None) -> None:
    log_fd = os.open(req["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    _plain_process(log_fd, [fd for fd in (report_fd, channel) if fd is not None])

    for procs in req["cgroup_procs"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    # What the zygote's waiter and the control plane made meanwhile, in this order.
    idmap = receive_fd(channel, "id-mapping namespace") if needs_idmap(req) else None
    if req.get("netns"):
        netns_fd = os.open(req["netns"], os.O_RDONLY | os.O_CLOEXEC)
    else:
        netns_fd = receive_fd(channel, "network namespace")
    if channel is not None:
        os.close(channel)
    sc.setns(netns_fd, sc.CLONE_NEWNET)
    os.close(netns_fd)
    for key, value in (
        ("net/ipv6/conf/all/disable_ipv6", "1"),
        ("net/ipv6/conf/default/disable_ipv6", "1"),
        ("net/ipv4/ping_group_range", "0 2147483647"),
        # The namespace belongs to the host's user namespace, so the instance's root
        # lacks CAP_NET_BIND_SERVICE there: low ports are opened to every user instead.
        ("net/ipv4/ip_unprivileged_port_start", "0"),
    ):
        try:
            with open(f"/proc/sys/{key}", "w") as f:
                f.write(value)
        except OSError:
            pass
    # The mount namespace is unshared by PID 1 itself: pivot_root moves the root of
    # every process in the namespace, and this process must keep the host's /proc.
    sc.unshare(sc.CLONE_NEWUTS | sc.CLONE_NEWIPC | sc.CLONE_NEWPID | sc.CLONE_NEWCGROUP)
    report(report_fd, {"namespaces": True})

    go_r, go_w = os.pipe()
    userns_r, userns_w = os.pipe()
    pid = fork()
    if pid == 0:
        os.close(go_w)
        os.close(userns_r)
        try:
            _init(req, report_fd, go_r, userns_w, idmap)
        except BaseException as exc:
            report(report_fd, {"error": f"instance setup failed: {exc!r}", "traceback": traceback.format_exc(limit=4)})
            traceback.print_exc()
        os._exit(1)
    os.close(go_r)
    os.close(userns_w)
    if idmap is not None:
        os.close(idmap)
    if os.read(userns_r, 16) != b"userns":
        os.waitpid(pid, 0)
        os._exit(1)
    map_ids(pid, f"0 {host_uid_base(req)} {int(req['uid_count'])}\n")
    report(report_fd, {"init_pid": pid})  # before "go": the agent must not report first
    os.write(go_w, b"go")
    os._exit(0)


def _mount_dev(root: str, base: int) -> None:
    dev = f"{root}/dev"
    sc.mount("tmpfs", dev, "tmpfs", sc.MS_NOSUID | sc.MS_NOEXEC, "mode=755,size=1024k")
    for name in DEVICES:
        target = f"{dev}/{name}"
        open(target, "w").close()
        sc.mount(f"/dev/{name}", target, None, sc.MS_BIND)
    os.mkdir(f"{dev}/pts")
    sc.mount("devpts", f"{dev}/pts", "devpts", sc.MS_NOSUID | sc.MS_NOEXEC, f"newinstance,ptmxmode=0666,mode=620,gid={base + 5}")
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    os.mkdir(f"{dev}/shm")
    sc.mount("tmpfs", f"{dev}/shm", "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=1777,size=65536k")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    for path in (dev, f"{dev}/shm"):
        os.chown(path, base, base)


def _init(req: dict[str, Any], report_fd: int, go_r: int, userns_w: int, idmap: int | None) -> None:
    base = host_uid_base(req)
    socket.sethostname(req["hostname"])
    sc.unshare(sc.CLONE_NEWNS)
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    root = _mount_root(req, idmap)
    # The tenant's files are in the tree from here on. No process of the instance
    # runs yet, but its files may hold links made to point at the host: every mount
    # point is made a real directory first, and files are written after pivot_root,
    # when every path resolves inside the instance's own root.
    for sub in MOUNT_POINTS:
        _real_directory(f"{root}/{sub}", base)
    sc.mount("proc", f"{root}/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    sc.mount("sysfs", f"{root}/sys", "sysfs", sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    _mask_kernel_files(root)
    _mount_dev(root, base)

    with contextlib.suppress(OSError):
        sc.set_process_title(REAPER_TITLE)
    native = _open_native(req)  # host paths: before pivot_root
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    write_file("/etc/resolv.conf", req["resolv_conf"], base)
    write_file("/etc/hosts", req["hosts"], base)
    write_file("/etc/hostname", req["hostname"] + "\n", base)
    if req.get("trust_ca"):
        _trust_ca(req["trust_ca"], base)
    report(report_fd, {"root": True})

    sc.unshare(sc.CLONE_NEWUSER)
    os.write(userns_w, b"userns")
    os.close(userns_w)
    if os.read(go_r, 2) != b"go":
        raise RuntimeError("parent did not map the user namespace")
    os.close(go_r)
    _become_instance_root(req.get("seccomp"))
    _reap_forever(req, report_fd, native)


def _become_instance_root(seccomp: str | None) -> None:
    """Uid 0 of the instance's user namespace (just entered), with no supplementary
    groups, `no_new_privs`, Docker's default capabilities and the seccomp filter: what
    PID 1 and every agent, the first or a respawned one, run as."""
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
    sc.limit_capabilities(CAPABILITIES)
    if seccomp:
        sc.install_seccomp(bytes.fromhex(seccomp))


def _open_native(req: dict[str, Any]) -> tuple[int, int] | None:
    """The native reaper (to exec) and the zygote's respawn directory (`O_PATH`), or
    None when the zygote has none: PID 1 then stays the Python reaper."""
    if not req.get("reaper") or not req.get("respawn_dir"):
        return None
    try:
        reaper = os.open(req["reaper"], os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        sys.stderr.write(f"corral init: no native reaper ({exc}), staying in Python\n")
        return None
    try:
        bell = os.open(req["respawn_dir"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(reaper)
        sys.stderr.write(f"corral init: no respawn directory ({exc}), staying in Python\n")
        return None
    return reaper, bell


def host_uid_base(req: dict[str, Any]) -> int:
    """The first host uid of this instance's own range (its root), which no other live
    instance shares; the files' owners on disk stay in the shared range `uid_base`."""
    return int(req.get("host_uid_base") or req["uid_base"])


def map_ids(pid: int, mapping: str) -> None:
    """The same uid and gid maps for the user namespace of `pid` (written from outside it)."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(mapping)


def needs_idmap(req: dict[str, Any]) -> bool:
    return "uid_base" in req and host_uid_base(req) != int(req["uid_base"])


def send_idmap(req: dict[str, Any], channel: int) -> None:
    """In the zygote's waiter, while the launcher joins its cgroups (which waits on the
    kernel for milliseconds): make the id-mapping namespace (a fork, itself a few
    milliseconds) and hand it over; or the reason it could not be made."""
    try:
        fd = _idmap_namespace(int(req["uid_base"]), host_uid_base(req), int(req["uid_count"]))
    except Exception as exc:
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(channel)) as sender:
            socket.send_fds(sender, [f"error: {exc!r}".encode()], [])
        return
    try:
        with socket.socket(fileno=os.dup(channel)) as sender:
            socket.send_fds(sender, [b"idmap"], [fd])
    finally:
        os.close(fd)


def receive_fd(channel: int | None, what: str) -> int:
    """The next descriptor on the launch's channel (see `launch`)."""
    if channel is None:
        raise RuntimeError(f"no {what} can come: the launch has no channel")
    with socket.socket(fileno=os.dup(channel)) as receiver:
        message, fds, _, _ = socket.recv_fds(receiver, 4096, 1)
    if not fds:
        raise RuntimeError(f"no {what} came: {message.decode(errors='replace') or 'its sender left'}")
    return fds[0]


def _idmap_namespace(disk_base: int, host_base: int, count: int) -> int:
    """A user namespace (its descriptor) mapping the ids files have on disk
    (`disk_base`...) to this instance's own (`host_base`...), for idmapped mounts;
    root stays root, for what overlayfs itself writes (its work directory)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(done_w)
            sc.unshare(sc.CLONE_NEWUSER)
            os.write(ready_w, b"1")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise RuntimeError("the id-mapping namespace was not made")
        map_ids(pid, f"0 0 1\n{disk_base} {host_base} {count}\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def _mount_root(req: dict[str, Any], idmap: int | None) -> str:
    """The overlay root, mounted with relative layer names, so that its options (which
    the instance reads in /proc/self/mountinfo) name no host path.

    A scratch tmpfs on `merged` (in this private mount namespace only) holds a bind
    mount of each lower layer (`l0`, `l1`, ...) and of the instance's directory (`i`,
    holding `upper` and `work`, which must share a mount); the root is mounted on
    `root` beside them, from there. They all go with the old root at pivot_root.

    With `idmap` (the instance has a uid range of its own), those binds are idmapped: files
    owned on disk by the shared range (`uid_base`, the templates' and every writable
    layer's) appear owned by the instance's range, and what the instance writes is
    stored in the shared range again. Layers stay shared and copyable as they are;
    only the running processes differ.
    """

    def bind(source: str, target: str) -> None:
        if idmap is None:
            sc.mount(source, target, None, sc.MS_BIND)
        else:
            sc.idmapped_bind(source, target, idmap)

    scratch = req["merged"]
    sc.mount("tmpfs", scratch, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "mode=700,size=64k")
    os.chdir(scratch)
    lowers = []
    for index, layer in enumerate(req["lower"].split(":")):
        os.mkdir(f"l{index}")
        bind(layer, f"l{index}")
        lowers.append(f"l{index}")
    upper, work = req["upper"], req["work"]
    instance_dir = os.path.dirname(upper)
    if os.path.dirname(work) != instance_dir:
        raise ValueError("upper and work must share their directory")
    os.mkdir("i")
    bind(instance_dir, "i")
    os.mkdir("root")
    options = f"lowerdir={':'.join(lowers)},upperdir=i/{os.path.basename(upper)},workdir=i/{os.path.basename(work)}"
    try:
        sc.mount("overlay", "root", "overlay", 0, options)
    finally:
        if idmap is not None:
            os.close(idmap)
    return f"{scratch}/root"


def _real_directory(path: str, uid: int) -> None:
    """`path` as a directory of its own: a link or file the tenant left there goes."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    if not os.path.isdir(path):
        os.mkdir(path, 0o755)
        os.chown(path, uid, uid)


def _mask_kernel_files(root: str) -> None:
    """Docker's masked and read-only paths of `/proc` and `/sys`."""
    for path in MASKED:
        target = f"{root}{path}"
        try:
            if os.path.isdir(target):
                sc.mount("tmpfs", target, "tmpfs", sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC, "size=0")
            else:
                sc.mount("/dev/null", target, None, sc.MS_BIND)
        except FileNotFoundError:
            continue
    for path in READ_ONLY:
        target = f"{root}{path}"
        try:
            sc.mount(target, target, None, sc.MS_BIND | sc.MS_REC)
        except FileNotFoundError:
            continue
        sc.mount(None, target, None, sc.MS_BIND | sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)


def _trust_ca(trust: dict[str, str], uid: int) -> None:
    """Install the node's egress CA: its own file, and appended to the system bundle.

    Runs after pivot_root, so every path (and any symlink the instance made) resolves
    inside the instance's own root.
    """
    pem = trust["pem"]
    for path in (trust["file"], trust["bundle"]):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    write_file(trust["file"], pem, uid)
    try:
        with open(trust["bundle"]) as handle:
            current = handle.read()
    except OSError:
        current = ""
    if pem.strip() not in current:
        write_file(trust["bundle"], (current.rstrip("\n") + "\n" if current.strip() else "") + pem, uid)


def _start_agent(req: dict[str, Any], ready_fd: int | None, close: tuple[int, ...] = (), gate: int | None = None) -> int:
    pid = fork()
    if pid:
        return pid
    for fd in close:  # PID 1's own (the reaper's binary, the respawn directory, the gate's end)
        os.close(fd)
    _agent_main(req, ready_fd, gate)


def _agent_main(req: dict[str, Any], ready_fd: int | None, gate: int | None = None) -> NoReturn:
    """The agent process, in its instance with its credentials; never returns."""
    try:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.setsid()
        with contextlib.suppress(OSError):
            sc.set_process_title("corral-agent")
        config = AgentConfig(
            address=req["address"],
            port=int(req["agent_port"]),
            token=req["token"],
            hostname=req["hostname"],
            env=dict(req.get("env") or {}),
        )
        trio.run(run, config, ready_fd, gate)
    except BaseException:
        traceback.print_exc()
        if ready_fd is not None:
            report(ready_fd, {"error": "agent failed: " + traceback.format_exc(limit=3)})
    os._exit(1)


def _exec_reaper(req: dict[str, Any], agent_pid: int, reaper: int, bell: int, gate: int) -> None:
    """PID 1 becomes the native reaper (`reaper.c`); returns only if the exec failed,
    having closed every copy of `gate` it made (the caller closes `gate`).

    The reaper's binary is mode 0711 (see `corral.vm.zygote`): unreadable by the
    instance's users, so the exec leaves PID 1 not dumpable (and the reaper says so
    itself first thing); its fds 3 and 4 stay out of the tenant's reach."""
    made: list[int] = []
    try:
        memfd = os.memfd_create("corral-agent", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        made.append(memfd)
        data = json.dumps({key: req.get(key) for key in AGENT_FIELDS}).encode()
        written = 0
        while written < len(data):
            written += os.write(memfd, data[written:])
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, seals)
        # Out of the way of 3, 4 and 5 first: any of these may be one of them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (memfd, bell, gate, reaper)]
        made.extend(high)
        for source, target in zip(high[:3], (LAUNCH_FD, BELL_FD, GATE_FD), strict=True):
            os.dup2(source, target)
            made.append(target)
        os.execve(high[3], [REAPER_TITLE], {"AGENT_PID": str(agent_pid)})
    finally:  # the exec failed
        for fd in made:
            with contextlib.suppress(OSError):
                os.close(fd)


def _reap_forever(req: dict[str, Any], report_fd: int, native: tuple[int, int] | None = None) -> None:
    """PID 1: reap every orphan, keep the agent alive, end everything on SIGTERM."""

    def shutdown(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGTERM)
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.02)
        os._exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if native is None:
        agent_pid = _start_agent(req, report_fd)
        os.close(report_fd)
    else:
        gate_r, gate_w = os.pipe()
        agent_pid = _start_agent(req, report_fd, (*native, gate_w), gate_r)
        os.close(report_fd)
        os.close(gate_r)
        try:
            _exec_reaper(req, agent_pid, *native, gate_w)
        except OSError as exc:
            sys.stderr.write(f"corral init: cannot exec the native reaper ({exc}), staying in Python\n")
        os.close(gate_w)  # the agent goes on
    while True:
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            pid = agent_pid
        if pid == agent_pid:
            sys.stderr.write("corral init: agent exited, restarting\n")
            time.sleep(0.2)
            agent_pid = _start_agent(req, None)


def respawn(conn_fd: int) -> None:
    """In a child of the zygote, for a native reaper that rang (see `reaper.c`): a new
    agent in that reaper's instance. Never returns.

    Everything comes from the reaper itself, never from a path it names: its
    namespaces, its cgroups (the ones it is in), its log (its stdout), and the agent's
    fields from its sealed memfd. So a caller that is not an instance's PID 1 gets
    nothing, and one that is gets an agent in its own instance only: this process
    drops every host privilege (it enters the instance's user namespace) before the
    agent runs a line of its own."""
    try:
        _respawn(conn_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"corral zygote: respawn refused or failed: {exc!r}\n".encode())
    os._exit(1)


def _pidfd_getfd(pidfd: int, fd: int) -> int:
    result = int(_libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"pidfd_getfd: {os.strerror(errno)}")
    return result


def _instance_init(pid: int) -> bool:
    """Whether host pid `pid` is PID 1 of a PID namespace below ours, and a reaper."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    nspids = fields.get("NSpid", "").split()
    return len(nspids) >= 2 and nspids[-1] == "1" and fields.get("Name", "").strip() == REAPER_TITLE


def _join_cgroups_of(pid: int) -> None:
    """Join every cgroup (v1 hierarchy or v2) that `pid` is in."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if path == "/":
            continue
        base = "/sys/fs/cgroup" if not controllers else f"/sys/fs/cgroup/{controllers.removeprefix('name=')}"
        procs = os.path.join(base + path, "cgroup.procs")
        if os.path.exists(procs):
            with open(procs, "w") as f:
                f.write(str(os.getpid()))


def _respawn(conn_fd: int) -> None:
    conn = socket.socket(fileno=conn_fd)
    pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if not _instance_init(pid):
        raise PermissionError(f"pid {pid} is not an instance's reaper")
    pidfd = os.pidfd_open(pid)
    memfd = _pidfd_getfd(pidfd, LAUNCH_FD)
    seals = fcntl.fcntl(memfd, fcntl.F_GET_SEALS)
    if not seals & fcntl.F_SEAL_WRITE:
        raise PermissionError("the reaper's launch fields are not sealed")
    fields = json.loads(os.pread(memfd, MAX_LAUNCH_FIELDS, 0))
    os.close(memfd)
    req = {key: fields.get(key) for key in AGENT_FIELDS}
    log_fd = _pidfd_getfd(pidfd, 1)
    namespaces = {
        name: os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        for name in ("net", "uts", "ipc", "cgroup", "pid", "mnt", "user")
    }
    _plain_process(log_fd, [conn.fileno(), pidfd, *namespaces.values()])
    os.setsid()
    _join_cgroups_of(pid)
    signal.pidfd_send_signal(pidfd, 0)  # still that reaper: the namespaces opened are its own
    for name in ("net", "uts", "ipc", "cgroup", "pid", "mnt"):
        sc.setns(namespaces[name], 0)
    os.chdir("/")
    sc.setns(namespaces["user"], sc.CLONE_NEWUSER)
    for fd in (pidfd, *namespaces.values()):
        os.close(fd)
    _become_instance_root(req.get("seccomp"))
    # Twice: an orphan goes to the reaper of its parent's PID namespace, so the agent's
    # parent must be inside the instance's (a child of this process) for PID 1 to adopt it.
    middle = fork()
    if middle == 0:
        if fork() == 0:
            with contextlib.suppress(OSError):
                conn.send(str(os.getpid()).encode())
            conn.close()
            _agent_main(req, None)
        os._exit(0)
    os.waitpid(middle, 0)
    os._exit(0)
