"""Deployments: publish time of a 10 MB, 1,000-file site, and its page through the
preview router beside Caddy's `file_server` on the same files, in the same run.

One `corral serve` (its own bridge, range and table) runs one sandbox holding a site
of 1,000 files (10 MiB of random bytes, 10 KiB each, beside a 1 KiB `index.html`).
It is published into a static deployment several times (the first publish stores the
artifact, later ones find it stored; the time is the whole synchronous `POST
/deployments/{id}/publish` as a client sees it). Then wrk fetches `/` (the 1 KiB
`index.html`) through the router (Host header of the deployment) and from Caddy
(Debian's package) serving the unpacked artifact directory, in alternating short
rounds at 1 and 16 connections. Goals (issue 16): publish under 2 s, the router at
least 0.5x Caddy's requests per second.

Needs root (instances), wrk and caddy.

    .venv/bin/python -m tools.bench.deployments [--seconds 3] [--rounds 3] [--publishes 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tools.bench.api import corral_key, median_result, process
from tools.bench.common import LoadResult, cleanup_host, free_port, run_wrk, wait_http

ADMIN_KEY = "msk_a_bench-operator-key-0123456789"
VENV_BIN = Path(sys.executable).parent
NAMES = {
    "CORRAL_BRIDGE": "corrald0",
    "CORRAL_SUBNET": "10.218.0.0/24",  # apart from every test range and the preview bench's
    "CORRAL_NFT_TABLE": "corral_bench_deploy",
    "CORRAL_LINK_PREFIX": "cd",
    "CORRAL_NETNS_PREFIX": "corrald-",
    "CORRAL_CGROUP_PARENT": "corral-bench-deploy",
}
MAKE_SITE = (
    "python3 -c \"import os\n"
    "os.makedirs('/workspace/site', exist_ok=True)\n"
    "open('/workspace/site/index.html','w').write('<!doctype html><title>bench</title>' + 'x' * 989)\n"
    "for i in range(999):\n"
    "    d = '/workspace/site/assets/%02d' % (i % 40)\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    open('%s/file%04d.bin' % (d, i), 'wb').write(os.urandom(10 * 1024 + 512))\n\""
)


@contextlib.contextmanager
def caddy_file_server(root: Path, port: int) -> Iterator[str]:
    """Caddy's file_server on 127.0.0.1:port over `root` (no admin endpoint, no HTTPS)."""
    caddy = shutil.which("caddy")
    if caddy is None:
        sys.exit("caddy is needed: apt-get install caddy")
    with tempfile.TemporaryDirectory() as config_dir:
        config = Path(config_dir) / "Caddyfile"
        config.write_text(f"{{\n\tadmin off\n\tauto_https off\n}}\nhttp://127.0.0.1:{port} {{\n\troot * {root}\n\tfile_server\n}}\n")
        env = {"HOME": config_dir, "XDG_DATA_HOME": config_dir, "XDG_CONFIG_HOME": config_dir}
        argv = [caddy, "run", "--config", str(config), "--adapter", "caddyfile"]
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_http(url)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


def row(name: str, connections: int, result: LoadResult) -> str:
    return f"{name:<22} {connections:>5} {result.requests_per_second:>10.0f} {result.p50_ms:>9.3f} {result.p99_ms:>9.3f} {result.errors:>7}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=3, help="length of one round against one server")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per connection count")
    parser.add_argument("--publishes", type=int, default=3, help="publishes of the 10 MB site to time")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sandboxes are real instances)")

    api_port, preview_port, caddy_port = free_port(), free_port(), free_port()
    env = {**NAMES, "CORRAL_ADMIN_KEY": ADMIN_KEY}
    if os.environ.get("CORRAL_TEMPLATE_CACHE"):
        env["CORRAL_TEMPLATE_DIR"] = os.environ["CORRAL_TEMPLATE_CACHE"]
    elif Path("/var/cache/corral/templates/default").is_dir():
        env["CORRAL_TEMPLATE_DIR"] = "/var/cache/corral/templates"
    publish_times: list[float] = []
    rounds: dict[tuple[str, int], list[LoadResult]] = {}
    ratios: dict[int, list[float]] = {1: [], 16: []}
    manifest: dict[str, int] = {}
    cleanup_host(NAMES)
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            serve = [str(VENV_BIN / "corral"), "serve", "--port", str(api_port), "--preview-port", str(preview_port),
                     "--data-dir", data_dir, "--log-level", "WARNING"]
            with process(serve, env):
                base = f"http://127.0.0.1:{api_port}"
                wait_http(f"{base}/healthz")
                key = corral_key(base)
                with httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=300) as api:
                    sandbox = api.post("/sandboxes", json={"name": "bench"}).raise_for_status().json()["data"]
                    made = api.post(f"/sandboxes/{sandbox['id']}/exec", json={"command": MAKE_SITE, "timeout": 120}).raise_for_status().json()
                    if made["exit_code"] != 0:
                        sys.exit(f"the site could not be made: {made['stderr']}")
                    project = sandbox["project_id"]
                    dep = api.post(f"/projects/{project}/deployments", json={"name": "bench"}).raise_for_status().json()["data"]
                    body = {"source_sandbox_id": sandbox["id"], "output_path": "/workspace/site"}
                    version: dict[str, object] = {}
                    for _ in range(args.publishes):
                        started = time.monotonic()
                        published = api.post(f"/deployments/{dep['id']}/publish", json=body)
                        publish_times.append(time.monotonic() - started)
                        published.raise_for_status()
                        version = published.json()["data"]["version"]
                    files = version["artifact_manifest"]
                    assert isinstance(files, dict)
                    manifest = {"file_count": int(files["file_count"]), "total_bytes": int(files["total_bytes"])}
                    site_dir = Path(data_dir) / "sites" / str(version["artifact_sha256"])
                    routed = f"http://127.0.0.1:{preview_port}/"
                    headers = {"Host": f"{dep['slug']}.corral.localhost:{preview_port}"}
                    check = httpx.get(routed, headers=headers)
                    if check.status_code != 200 or len(check.content) != 1024:
                        sys.exit(f"the router did not serve the page: {check.status_code} {check.text[:200]}")
                    with caddy_file_server(site_dir, caddy_port) as caddy_url:
                        if httpx.get(caddy_url).content != check.content:
                            sys.exit("caddy and the router serve different pages")
                        for connections in (1, 16):
                            for _ in range(args.rounds):
                                plain = run_wrk(caddy_url, connections, args.seconds)
                                through = run_wrk(routed, connections, args.seconds, headers)
                                rounds.setdefault(("caddy file_server", connections), []).append(plain)
                                rounds.setdefault(("corral router", connections), []).append(through)
                                ratios[connections].append(through.requests_per_second / plain.requests_per_second)
                    api.delete(f"/sandboxes/{sandbox['id']}")
                    api.delete(f"/deployments/{dep['id']}")
    finally:
        cleanup_host(NAMES)

    print(f"publish of {manifest.get('file_count')} files, {manifest.get('total_bytes', 0) / 1e6:.1f} MB: "
          + ", ".join(f"{t:.2f} s" for t in publish_times)
          + f" (median {statistics.median(publish_times):.2f} s; goal < 2 s)")
    print(f"medians of {args.rounds} alternating rounds of {args.seconds} s; a 1 KiB index.html")
    print(f"{'server':<22} {'conns':>5} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'errors':>7}")
    for (name, connections), results in rounds.items():
        print(row(name, connections, median_result(results)))
    for connections in (1, 16):
        print(f"router / caddy requests per second with {connections:>2} connection(s): "
              f"{statistics.median(ratios[connections]):.2f} (goal >= 0.5)")


if __name__ == "__main__":
    main()
