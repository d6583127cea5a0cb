"""Custom domains and the TLS edge: what a custom domain costs at the router, how fast
`GET /tls/ask` answers, and the edge's first certificate and HTTPS requests.

A node with real instances (root, templates built) publishes a static deployment,
attaches a custom domain, verifies it against an in-process DNS server, and starts
the edge with Caddy's internal CA. wrk drives the router at 1 and 16 connections
with the deployment's own host and with the custom domain (alternating rounds,
medians), and `/tls/ask`; the edge is timed with sequential HTTPS requests.

    .venv/bin/python -m tools.bench.domains [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from corral.net.edge import edge_config, internal_root
from corral.node import run_edge
from tests.dns_server import dns_server
from tests.support import RUNTIME_SETTINGS, Api, free_port, running_server
from tools.bench.common import LoadResult, run_wrk

DOMAIN = "bench.domains-test.example"


async def _publish(api: Api, key: str, project_id: str) -> dict[str, Any]:
    sandbox = (await api.request("POST", "/api/v1/sandboxes", key=key, json={})).json()["data"]
    command = "mkdir -p /workspace/site && printf '<h1>bench</h1>' > /workspace/site/index.html"
    await api.request("POST", f"/api/v1/sandboxes/{sandbox['id']}/exec", key=key, json={"command": command})
    dep = (await api.request("POST", f"/api/v1/projects/{project_id}/deployments", key=key, json={"name": "bench"})).json()["data"]
    body = {"source_sandbox_id": sandbox["id"], "output_path": "/workspace/site"}
    published = await api.request("POST", f"/api/v1/deployments/{dep['id']}/publish", key=key, json=body, timeout=300)
    assert published.status_code == 200, published.text
    return dict(dep)


async def _wrk(url: str, connections: int, seconds: int, host: str) -> LoadResult:
    return await trio.to_thread.run_sync(lambda: run_wrk(url, connections, seconds, {"Host": host}))


def _line(name: str, results: list[LoadResult]) -> str:
    rps = statistics.median(r.requests_per_second for r in results)
    p50 = statistics.median(r.p50_ms for r in results)
    p99 = statistics.median(r.p99_ms for r in results)
    errors = sum(r.errors for r in results)
    return f"{name:<44} {rps:>9.0f} req/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   errors {errors}"


async def main(seconds: int, rounds: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="corral-bench-domains-"))
    async with dns_server() as dns:
        settings = {
            **RUNTIME_SETTINGS, "dns_servers": dns.address, "acme_ca": "internal",
            "edge_https_port": free_port(), "edge_http_port": free_port(),
        }
        async with running_server(data_dir, **settings) as api, trio.open_nursery() as nursery:
            try:
                tenant = await api.create_tenant()
                dep = await _publish(api, tenant.key, tenant.project_id)
                domain = (await api.request("POST", "/api/v1/custom-domains", key=tenant.key,
                                            json={"domain": DOMAIN, "deployment_id": dep["id"]})).json()["data"]
                dns.records[DOMAIN] = domain["verification_target"]
                started = time.perf_counter()
                verified = await api.request("POST", f"/api/v1/custom-domains/{domain['id']}/verify", key=tenant.key)
                print(f"verify (DNS on loopback): {verified.status_code} in {(time.perf_counter() - started) * 1000:.1f} ms")

                router = f"http://127.0.0.1:{api.platform.settings.preview_port}/"
                ask = f"{api.client.base_url}/api/v1/tls/ask?domain={DOMAIN}"
                for connections in (1, 16):
                    own: list[LoadResult] = []
                    custom: list[LoadResult] = []
                    asks: list[LoadResult] = []
                    for _ in range(rounds):
                        own.append(await _wrk(router, connections, seconds, domain["verification_target"]))
                        custom.append(await _wrk(router, connections, seconds, DOMAIN))
                        asks.append(await _wrk(ask, connections, seconds, "127.0.0.1"))
                    print(_line(f"router, the deployment's own host, c={connections}", own))
                    print(_line(f"router, its custom domain, c={connections}", custom))
                    print(_line(f"GET /tls/ask, c={connections}", asks))

                started = time.perf_counter()
                await nursery.start(run_edge, api.platform.settings)
                print(f"edge (caddy) started in {(time.perf_counter() - started) * 1000:.0f} ms")
                root = internal_root(edge_config(api.platform.settings))
                while not root.exists():
                    await trio.sleep(0.05)
                roots = ssl.create_default_context(cafile=str(root))
                port = api.platform.settings.edge_https_port
                async with httpx.AsyncClient(verify=roots, timeout=30) as client:
                    async def get() -> httpx.Response:
                        return await client.get(f"https://127.0.0.1:{port}/", headers={"Host": DOMAIN}, extensions={"sni_hostname": DOMAIN})

                    started = time.perf_counter()
                    first = await get()
                    print(f"first HTTPS request (certificate issued on demand): {first.status_code} in "
                          f"{(time.perf_counter() - started) * 1000:.0f} ms")
                    samples = []
                    for _ in range(1000):
                        started = time.perf_counter()
                        assert (await get()).status_code == 200
                        samples.append((time.perf_counter() - started) * 1000)
                    samples.sort()
                    print(f"{'edge, kept-alive HTTPS, sequential':<44} {1000 / statistics.mean(samples):>9.0f} req/s   "
                          f"p50 {statistics.median(samples):6.2f} ms   p99 {samples[989]:6.2f} ms")
            finally:
                nursery.cancel_scope.cancel()
                driver = await api.platform.runtime.driver()
                for info in await driver.instances():
                    await driver.destroy(info.id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    os.environ.setdefault("CORRAL_PREPARE_TEMPLATES", "0")
    trio.run(main, options.seconds, options.rounds)
