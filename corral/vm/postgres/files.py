"""A server's configuration files and the commands run as its own user.

Every server runs as a uid of its own (no passwd entry needed: PostgreSQL's server
does not look its user up, only `initdb` does, so the template is made as `nobody`
and each copy is handed to its server's uid). Processes join the server's cgroups
before they drop root, so the postmaster and every backend are limited by size.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import trio

from .layout import ADMIN_ROLE, PG_BIN, REPLICATION_ROLE, SOCKET_PORT

log = logging.getLogger("corral.vm.postgres")

CONF_INCLUDE = "include_if_exists = 'corral.conf'\n"
FRESH_LINE = "fsync = off  # the first start of a fresh copy (corral)\n"
"""A setting of the first start of a fresh copy only (`mark_fresh`): the last line of
`corral.conf`, removed and reloaded away once the server is ready (`end_fresh`)."""


def hba(role: str) -> str:
    """The server's own role (SCRAM, socket and TCP), the control plane (root, by peer,
    socket only) and the replication role (SCRAM): over the socket for a replica on this
    node, over TCP for one on another node (issue 30), which also drops its slot in a
    session on `postgres` when it goes. The replication role's password is derived from
    the cluster's secret, per primary (`PostgresDriver.replication_password`)."""
    return (
        f"local all {ADMIN_ROLE} peer map=admin\n"
        f"local replication {ADMIN_ROLE} peer map=admin\n"
        f"local replication {REPLICATION_ROLE} scram-sha-256\n"
        f"host replication {REPLICATION_ROLE} 0.0.0.0/0 scram-sha-256\n"
        f"host postgres {REPLICATION_ROLE} 0.0.0.0/0 scram-sha-256\n"
        f'local all "{role}" scram-sha-256\n'
        f'host all "{role}" 0.0.0.0/0 scram-sha-256\n'
    )


def replica_slot(server_id: str, *, remote: bool = False) -> str:
    """The physical replication slot a replica holds on its primary: the primary keeps
    every WAL segment the replica has not received yet, however long it was away (up to
    `max_slot_wal_keep_size`). A replica on another node has `remote_<id>`: the
    primary, which cannot tell whether such a replica still exists, leaves it alone."""
    return ("remote_" if remote else "replica_") + server_id.replace("-", "")


def replica_name(server_id: str) -> str:
    """The `application_name` a replica streams under: what its primary's
    `synchronous_standby_names` names it by."""
    return "r" + server_id.replace("-", "")[:12]


STANDBYS_FILE = "standbys.conf"
"""In a server's run directory (never in its data directory, so that no copy of the
data, a branch, a backup or a replica, carries it): the replicas its commits wait for."""


def standbys_conf(names: list[str]) -> str:
    """`synchronous_standby_names` waiting for every one of `names` (none: no wait)."""
    if not names:
        return "synchronous_standby_names = ''\n"
    listed = ", ".join(f'"{name}"' for name in names)
    return f"synchronous_standby_names = 'ANY {len(names)} ({listed})'\n"


def conf(
    run_dir: Path,
    memory_mb: int,
    primary_conninfo: str | None = None,
    port: int = SOCKET_PORT,
    listen: str = "",
    primary_slot: str | None = None,
) -> str:
    shared_buffers = max(16, min(1024, memory_mb // 8))
    lines = [
        f"listen_addresses = '{listen}'",
        f"port = {port}",
        f"unix_socket_directories = '{run_dir}'",
        "unix_socket_permissions = 0777",
        f"shared_buffers = {shared_buffers}MB",
        "max_connections = 100",
        "password_encryption = 'scram-sha-256'",
        "log_line_prefix = '%m [%p] '",
        "wal_level = replica",
        "max_wal_senders = 10",
        # A backup (`pg_basebackup -X fetch`) needs every WAL segment from its start to its
        # end; a checkpoint meanwhile (another backup's, a branch's) must not recycle them.
        "wal_keep_size = 128MB",
        # A replica on another node that went without dropping its slot (its primary was
        # unreachable then) holds at most this much WAL.
        "max_slot_wal_keep_size = 4GB",
        "hot_standby = on",
        "wal_receiver_status_interval = 1s",
        # A replica whose primary went away (stopped, suspended, restarted) tries again
        # within a second: the primary's commits wait for it once it is back.
        "wal_retrieve_retry_interval = 1s",
        # The replicas on other nodes whose flush a commit waits for (`standbys_conf`), last.
        f"include_if_exists = '{run_dir / STANDBYS_FILE}'",
    ]
    if primary_conninfo is not None:
        escaped = primary_conninfo.replace("'", "''")
        lines.append(f"primary_conninfo = '{escaped}'")
    if primary_slot is not None:
        lines.append(f"primary_slot_name = '{primary_slot}'")
    return "\n".join(lines) + "\n"


def mark_fresh(data: Path) -> None:
    """The next start of this copy runs without fsync. A copy made while its source ran
    (a branch) starts with crash recovery, which first fsyncs every file of the data
    directory one by one (a third of a second for 60 MB); the copy is made durable
    instead by one `syncfs` of its own disk after the start (`sync_later`), and fsync is
    back on (`end_fresh`) before any client connects."""
    with open(data / "corral.conf", "a") as handle:
        handle.write(FRESH_LINE)


def end_fresh(data: Path) -> bool:
    """Whether the fresh start's settings were there (and are gone now: a reload of the
    server makes it take its usual settings)."""
    path = data / "corral.conf"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False
    if FRESH_LINE not in text:
        return False
    path.write_text(text.replace(FRESH_LINE, ""))
    return True


_libc = ctypes.CDLL(None, use_errno=True)


def sync_now(path: Path) -> None:
    """Write the file system holding `path` (a server's own disk) out (`syncfs`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # removed meanwhile
    try:
        if _libc.syncfs(fd) != 0:
            log.warning("syncfs %s: %s", path, os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)


def sync_later(path: Path) -> None:
    """`sync_now` in a thread of its own: what a fresh start skipped (`mark_fresh`), off
    the create's critical path."""
    threading.Thread(target=sync_now, args=(path,), name="corral-pg-sync", daemon=True).start()


def write_config(
    data: Path,
    run_dir: Path,
    role: str,
    memory_mb: int,
    primary_conninfo: str | None = None,
    port: int = SOCKET_PORT,
    listen: str = "",
    primary_slot: str | None = None,
) -> None:
    """(Re)write what makes a copied cluster this server's: socket, port, limits, admission."""
    (data / "corral.conf").write_text(conf(run_dir, memory_mb, primary_conninfo, port, listen, primary_slot))
    (data / "pg_hba.conf").write_text(hba(role))
    (data / "pg_ident.conf").write_text(f"admin root {ADMIN_ROLE}\n")
    main = data / "postgresql.conf"
    text = main.read_text()
    if CONF_INCLUDE not in text:
        main.write_text(text + "\n" + CONF_INCLUDE)
    auto = data / "postgresql.auto.conf"
    if auto.exists():  # a parent replica's connection must not follow a branch or a backup
        kept = [line for line in auto.read_text().splitlines() if not line.startswith(("primary_conninfo", "primary_slot_name"))]
        auto.write_text("\n".join(kept) + "\n")
    for stale in ("postmaster.pid", "postmaster.opts", "standby.signal", "recovery.signal"):
        (data / stale).unlink(missing_ok=True)
    if primary_conninfo is not None:
        (data / "standby.signal").write_text("")


def chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)
    for base, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(base, name), uid, uid)


def copy_tree(source: Path, dest: Path, background: bool = False) -> None:
    """`cp -a` (a reflink where the file system has them); `background`: at a low
    priority, behind what a request waits for."""
    nice = ["nice", "-n", "15"] if background else []
    subprocess.run([*nice, "cp", "-a", "--reflink=auto", str(source), str(dest)], check=True, capture_output=True)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def demote(uid: int, cgroup_procs: list[str]) -> Callable[[], None]:
    """A preexec function: join the server's cgroups, then become its uid."""

    def run() -> None:
        for procs in cgroup_procs:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return run


ENV = {"PATH": f"{PG_BIN}:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


async def run_as(uid: int, argv: list[str], cgroup_procs: list[str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        argv,
        preexec_fn=demote(uid, cgroup_procs or []),
        env=ENV,
        cwd=str(cwd) if cwd else "/",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def spawn_as(uid: int, argv: list[str], output: int, cgroup_procs: list[str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Start `argv` as `uid` in a session of its own, its output to the descriptor
    `output`, and return at once: `setsid --fork` runs it as a grandchild, which outlives
    this process like a server started by `pg_ctl`."""
    return await trio.run_process(
        ["setsid", "--fork", *argv],
        preexec_fn=demote(uid, cgroup_procs or []),
        env=ENV,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
        check=False,
    )


def postmaster_pid(data: Path) -> int | None:
    """The running postmaster's pid from `postmaster.pid`, if that process lives."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"postgres" not in cmdline or _zombie(pid):
        return None
    return pid


def server_ready(data: Path) -> bool:
    """`postmaster.pid`'s status line says `ready` (PostgreSQL writes it once it accepts
    connections) and the postmaster lives."""
    try:
        lines = (data / "postmaster.pid").read_text().split("\n")
    except OSError:
        return False
    return len(lines) > 7 and lines[7].strip() == "ready" and postmaster_pid(data) is not None


def failed_to_start(data: Path, waited: float) -> bool:
    """The server is not coming: its pid file names a dead postmaster, or there is still
    none after 10 s (a postmaster that fails at once never writes one)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):  # not written yet, or being written
        return waited > 10.0
    return postmaster_pid(data) is None and not Path(f"/proc/{pid}").exists()


def _zombie(pid: int) -> bool:
    """A killed postmaster reparented to this process (a subreaper) stays a zombie until
    reaped: it is reaped here, and counts as gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                if line.split()[1] not in ("Z", "X"):
                    return False
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
                return True
    except OSError:
        return True
    return False


def clear_stale_lock(data: Path, run_dir: Path) -> None:
    """Remove the lock files of a server that is gone (its processes were killed): a
    killed postmaster not yet reaped still answers `kill(pid, 0)`, and PostgreSQL would
    refuse to start over its lock files."""
    if postmaster_pid(data) is not None:
        return
    (data / "postmaster.pid").unlink(missing_ok=True)
    for stale in run_dir.glob(".s.PGSQL.*"):
        stale.unlink(missing_ok=True)
