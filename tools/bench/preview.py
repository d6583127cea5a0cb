"""Preview router: a static server inside a sandbox, reached directly and through the router.

One `corral serve` (its own bridge, range and table) runs one sandbox with a static
file server (Python's threading HTTP/1.1 server on /workspace, with Nagle off and a
listen backlog of 128: the default 5 drops connections opened all at once and adds
1 s SYN retries to both paths). wrk fetches a 1 KiB
file from it in alternating short rounds, directly at the instance's address and
through the preview router (Host header of the preview, `X-Preview-Token`), at 1 and
16 connections, in the same run. Reported: requests per second and p50/p99 of both,
the router's added latency at p50 (goal: under 1 ms) and the throughput ratio.

Needs root (instances) and wrk. The default template must be built (it is built on
first use otherwise, about 40 s).

    .venv/bin/python -m tools.bench.preview [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from tools.bench.api import corral_key, median_result, process
from tools.bench.common import LoadResult, cleanup_host, free_port, run_wrk, wait_http

ADMIN_KEY = "msk_a_bench-operator-key-0123456789"
VENV_BIN = Path(sys.executable).parent
NAMES = {
    "CORRAL_BRIDGE": "corralp0",
    "CORRAL_SUBNET": "10.217.0.0/24",  # apart from every test range (10.213-10.216)
    "CORRAL_NFT_TABLE": "corral_bench_preview",
    "CORRAL_LINK_PREFIX": "cp",
    "CORRAL_NETNS_PREFIX": "corralp-",
    "CORRAL_CGROUP_PARENT": "corral-bench-preview",
}
STATIC_SERVER = (
    "import functools, http.server as h\n"
    "class H(h.SimpleHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    disable_nagle_algorithm = True\n"
    "    def log_message(self, *a): pass\n"
    "h.ThreadingHTTPServer.request_queue_size = 128\n"
    "h.ThreadingHTTPServer(('0.0.0.0', 8000), functools.partial(H, directory='/workspace/site')).serve_forever()\n"
)


@contextlib.contextmanager
def sandbox_with_static_server(base: str, key: str) -> Iterator[tuple[str, str, str]]:
    """(direct URL, slug, preview token) of a sandbox serving /workspace/site on port 8000."""
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{base}/api/v1", headers=auth, timeout=120) as api:
        sandbox = api.post("/sandboxes", json={"name": "bench"}).raise_for_status().json()["data"]
        sid = sandbox["id"]
        try:
            api.post(f"/sandboxes/{sid}/files/write", json={"path": "/workspace/site/index.html", "content": "x" * 1024}).raise_for_status()
            api.post(f"/sandboxes/{sid}/files/write", json={"path": "/workspace/serve.py", "content": STATIC_SERVER}).raise_for_status()
            api.post(f"/sandboxes/{sid}/processes", json={"cmd": "python3 /workspace/serve.py"}).raise_for_status()
            api.post(f"/sandboxes/{sid}/expose", json={"port": 8000}).raise_for_status()
            token = api.post(f"/sandboxes/{sid}/preview-token", json={"expires_in": 86400}).raise_for_status().json()["data"]["token"]
            address = api.post(f"/sandboxes/{sid}/exec", json={"command": "hostname -I"}).raise_for_status().json()["stdout"].split()[0]
            direct = f"http://{address}:8000/index.html"
            wait_http(direct)
            yield direct, sandbox["slug"], token
        finally:
            api.delete(f"/sandboxes/{sid}")


def row(name: str, connections: int, result: LoadResult) -> str:
    return f"{name:<22} {connections:>5} {result.requests_per_second:>10.0f} {result.p50_ms:>9.3f} {result.p99_ms:>9.3f} {result.errors:>7}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=3, help="length of one round against one path")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per connection count")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sandboxes are real instances)")

    api_port, preview_port = free_port(), free_port()
    rounds: dict[tuple[str, int], list[LoadResult]] = {}
    added: dict[int, list[float]] = {1: [], 16: []}
    ratios: dict[int, list[float]] = {1: [], 16: []}
    env = {**NAMES, "CORRAL_ADMIN_KEY": ADMIN_KEY}
    if os.environ.get("CORRAL_TEMPLATE_CACHE"):
        env["CORRAL_TEMPLATE_DIR"] = os.environ["CORRAL_TEMPLATE_CACHE"]
    elif Path("/var/cache/corral/templates/default").is_dir():
        env["CORRAL_TEMPLATE_DIR"] = "/var/cache/corral/templates"
    cleanup_host(NAMES)
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            serve = [str(VENV_BIN / "corral"), "serve", "--port", str(api_port), "--preview-port", str(preview_port),
                     "--data-dir", data_dir, "--log-level", "WARNING"]
            with process(serve, env):
                base = f"http://127.0.0.1:{api_port}"
                wait_http(f"{base}/healthz")
                with sandbox_with_static_server(base, corral_key(base)) as (direct, slug, token):
                    routed = f"http://127.0.0.1:{preview_port}/index.html"
                    headers = {"Host": f"8000-{slug}.sandbox.corral.localhost:{preview_port}", "X-Preview-Token": token}
                    check = httpx.get(routed, headers=headers)
                    if check.status_code != 200 or len(check.content) != 1024:
                        sys.exit(f"the router did not serve the file: {check.status_code} {check.text[:200]}")
                    # Alternate short rounds so that the machine's drift hits both paths alike.
                    for connections in (1, 16):
                        for _ in range(args.rounds):
                            plain = run_wrk(direct, connections, args.seconds)
                            through = run_wrk(routed, connections, args.seconds, headers)
                            rounds.setdefault(("direct", connections), []).append(plain)
                            rounds.setdefault(("through the router", connections), []).append(through)
                            added[connections].append(through.p50_ms - plain.p50_ms)
                            ratios[connections].append(through.requests_per_second / plain.requests_per_second)
    finally:
        cleanup_host(NAMES)

    print(f"medians of {args.rounds} alternating rounds of {args.seconds} s; a 1 KiB static file from a sandbox")
    print(f"{'path':<22} {'conns':>5} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'errors':>7}")
    for (name, connections), results in rounds.items():
        print(row(name, connections, median_result(results)))
    for connections in (1, 16):
        values, rates = sorted(added[connections]), ratios[connections]
        median_added = values[len(values) // 2]
        print(
            f"router adds at p50 with {connections:>2} connection(s): {median_added:.3f} ms "
            f"(rounds {values[0]:.3f}..{values[-1]:.3f}; goal < 1 ms); "
            f"throughput ratio {sorted(rates)[len(rates) // 2]:.2f}"
        )


if __name__ == "__main__":
    main()
