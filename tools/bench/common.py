"""Shared benchmark plumbing: free ports, waiting for servers, wrk runs and parsing."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout} s")


def require_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        sys.exit("wrk is needed: apt-get install wrk")
    return path


@dataclass(frozen=True)
class LoadResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if not match:
        raise ValueError(f"unexpected latency {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def run_wrk(url: str, connections: int, seconds: int, headers: dict[str, str] | None = None) -> LoadResult:
    argv = [require_wrk(), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in (headers or {}).items():
        argv += ["-H", f"{name}: {value}"]
    output = subprocess.run([*argv, url], check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output)[1])  # type: ignore[index]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", output, re.M)[1])  # type: ignore[index]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", output, re.M)[1])  # type: ignore[index]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    errors = int(non2xx[1]) if non2xx else 0
    if socket_errors:
        errors += sum(int(v) for v in socket_errors.groups())
    return LoadResult(rps, p50, p99, errors)


def cleanup_host(names: dict[str, str]) -> None:
    """Remove a bench node's bridge, veths, namespaces, nftables tables, cgroups and
    mounted disks (`names`: its `CORRAL_*` host names; instances are destroyed first)."""
    from corral.vm import release_mounts

    release_mounts(names["CORRAL_CGROUP_PARENT"])  # the node's spare disks stay mounted by design
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if name.startswith(names["CORRAL_NETNS_PREFIX"]):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(names["CORRAL_LINK_PREFIX"]) or name == names["CORRAL_BRIDGE"]:
            subprocess.run(["ip", "link", "delete", name], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", names["CORRAL_NFT_TABLE"]], capture_output=True)
    subprocess.run(["nft", "delete", "table", "ip", f"{names['CORRAL_NFT_TABLE']}_egress"], capture_output=True)
    for controller in ("cpu", "cpuacct", "memory", "pids"):
        with contextlib.suppress(OSError):
            os.rmdir(f"/sys/fs/cgroup/{controller}/{names['CORRAL_CGROUP_PARENT']}")
