"""A real `corral serve` process for the operator's-eye tests: its log in a file (a
pipe nobody reads would fill and stop it), stopped with SIGTERM at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from tests.support import ADMIN_KEY, PASSWORD, free_port

T = TypeVar("T")


@dataclass
class Served:
    base: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def owner_key(self, name: str, email: str) -> str:
        """A new tenant's owner key."""
        created = httpx.post(
            f"{self.base}/api/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            json={"name": name, "owner_email": email, "owner_password": PASSWORD}, timeout=30,
        )
        assert created.status_code == 201, created.text
        return str(created.json()["data"]["api_key"]["key"])


def wait_for(what: str, check: Callable[[], T | None], seconds: float = 60) -> T:
    """`check()`'s first true answer, asked every 50 ms; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.05)


def wait_until_answering(what: str, url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Until `url` answers 200; fails with the process's log when it exits first."""

    def answering() -> bool:
        assert process.poll() is None, log_path.read_text()
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(what, answering)


@contextlib.contextmanager
def corral_serve(
    directory: Path, env: dict[str, str], *args: str, data_dir: Path | None = None, log_name: str = "node.log"
) -> Iterator[Served]:
    """`corral serve` on free ports with `env` (besides the admin key; no template
    builds) and `args`, healthy when entered; unless the test killed it, it must exit 0
    on SIGTERM."""
    port = free_port()
    log_path = directory / log_name
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "corral", "serve", "--port", str(port), "--preview-port", str(free_port()),
             "--data-dir", str(data_dir or directory / "data"), *args],
            env={**os.environ, "CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_PREPARE_TEMPLATES": "0", **env},
            stdout=log_file, stderr=log_file,
        )
    served = Served(f"http://127.0.0.1:{port}", log_path, process)
    try:
        wait_until_answering("healthy server", f"{served.base}/healthz", process, log_path)
        yield served
    finally:
        killed = process.poll() is not None
        if not killed:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
            assert killed or code == 0, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
