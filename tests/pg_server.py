"""A throwaway PostgreSQL server for tests, run as an unprivileged user on a free port.

`initdb` refuses to run as root, so the cluster belongs to the `postgres` system
user (created by the Debian package) or, failing that, to `nobody`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import free_port

PG_BIN_CANDIDATES = [Path(f"/usr/lib/postgresql/{v}/bin") for v in (17, 16, 15, 14, 13)]


def find_pg_bin() -> Path | None:
    for candidate in PG_BIN_CANDIDATES:
        if (candidate / "initdb").exists():
            return candidate
    return None


def _service_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("no unprivileged user to run PostgreSQL as")


def _as_user(user: pwd.struct_passwd, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    def demote() -> None:
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return subprocess.run(argv, preexec_fn=demote, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a fresh cluster; yields a `postgresql://` URL to a database named `corral`."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries not found; tools/test installs them")
    user = _service_user()
    base = Path(tempfile.mkdtemp(prefix="corral-pg-"))
    os.chown(base, user.pw_uid, user.pw_gid)
    data = base / "data"
    port = free_port()
    try:
        _as_user(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", "corral", "-A", "trust", "--no-sync", "-E", "UTF8"])
        _as_user(
            user,
            [
                str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(base / "log"), "start",
                "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
                " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
            ],
        )
        _as_user(user, [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "corral", "corral"])
        yield f"postgresql://corral@127.0.0.1:{port}/corral"
    finally:
        with contextlib.suppress(Exception):
            _as_user(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
        time.sleep(0.05)
        shutil.rmtree(base, ignore_errors=True)


def create_database(url: str, name: str) -> str:
    """A new empty database on the same server; returns its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + f"/{name}"
