"""A server's configuration files and the commands run as its own user.

Every server runs as a uid of its own (no passwd entry needed: PostgreSQL's server
does not look its user up, only `initdb` does, so the template is made as `nobody`
and each copy is handed to its server's uid). Processes join the server's cgroups
before they drop root, so the postmaster and every backend are limited by size.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import trio

from .layout import ADMIN_ROLE, PG_BIN, REPLICATION_ROLE, SOCKET_PORT

CONF_INCLUDE = "include_if_exists = 'corral.conf'\n"


def hba(role: str) -> str:
    """Only the server's own role (SCRAM), the replication role (SCRAM), and the
    control plane (root, by peer) are admitted, and only over the socket."""
    return (
        f"local all {ADMIN_ROLE} peer map=admin\n"
        f"local replication {ADMIN_ROLE} peer map=admin\n"
        f"local replication {REPLICATION_ROLE} scram-sha-256\n"
        f'local all "{role}" scram-sha-256\n'
    )


def conf(run_dir: Path, memory_mb: int, primary_conninfo: str | None = None) -> str:
    shared_buffers = max(16, min(1024, memory_mb // 8))
    lines = [
        "listen_addresses = ''",
        f"port = {SOCKET_PORT}",
        f"unix_socket_directories = '{run_dir}'",
        "unix_socket_permissions = 0777",
        f"shared_buffers = {shared_buffers}MB",
        "max_connections = 100",
        "password_encryption = 'scram-sha-256'",
        "log_line_prefix = '%m [%p] '",
        "wal_level = replica",
        "max_wal_senders = 10",
        "hot_standby = on",
        "wal_receiver_status_interval = 1s",
    ]
    if primary_conninfo is not None:
        escaped = primary_conninfo.replace("'", "''")
        lines.append(f"primary_conninfo = '{escaped}'")
    return "\n".join(lines) + "\n"


def write_config(data: Path, run_dir: Path, role: str, memory_mb: int, primary_conninfo: str | None = None) -> None:
    """(Re)write what makes a copied cluster this server's: socket, limits, admission."""
    (data / "corral.conf").write_text(conf(run_dir, memory_mb, primary_conninfo))
    (data / "pg_hba.conf").write_text(hba(role))
    (data / "pg_ident.conf").write_text(f"admin root {ADMIN_ROLE}\n")
    main = data / "postgresql.conf"
    text = main.read_text()
    if CONF_INCLUDE not in text:
        main.write_text(text + "\n" + CONF_INCLUDE)
    auto = data / "postgresql.auto.conf"
    if auto.exists():  # a parent replica's connection must not follow a branch or a backup
        kept = [line for line in auto.read_text().splitlines() if not line.startswith("primary_conninfo")]
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


def copy_tree(source: Path, dest: Path) -> None:
    subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(dest)], check=True, capture_output=True)


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
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    if b"postgres" not in cmdline or " Z " in status.split("State:", 1)[-1][:6]:
        return None
    return pid
