#!/usr/bin/env python3
"""A preview request relayed through another node's router against the same request
made on the home's router (issue 30), in one run on one throwaway PostgreSQL: a
sandbox on node A runs the preview tests' app; a client with a kept-alive connection
to each router asks for `/pixel.png` (a preview token in a header), the two routers
alternated, and then sends WebSocket messages to the app's echo through each. p50 and
p99 of each, and what the relay adds. Needs root and the default template; uses host
names of its own and removes what it made.

    .venv/bin/python -m tools.bench.preview_nodes [--requests 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import wrap_client_stream

from tests.http.preview_support import APP
from tests.pg_server import create_database, postgres_server
from tests.serve_process import Served, corral_serve
from tests.support import free_port
from tools.bench.api import platform_key
from tools.bench.node_events import NODES, cleanup_nodes, node_env

API = "/api/v1"
PORT = 8000


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3)}


def compared(times: dict[str, list[float]]) -> dict[str, Any]:
    direct, relayed = figures(times["direct"]), figures(times["relayed"])
    return {"direct": direct, "relayed": relayed, "added_p50_ms": round(relayed["p50_ms"] - direct["p50_ms"], 3),
            "added_p99_ms": round(relayed["p99_ms"] - direct["p99_ms"], 3)}


async def measure(a: Served, b: Served, routers: dict[str, int], requests: int) -> dict[str, Any]:
    key = platform_key(a.base, a.owner_key("Bench previews", "owner@bench-previews.example"))
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as api:
        made = await api.post(f"{a.base}{API}/sandboxes", json={})
        assert made.status_code == 201, made.text
        sandbox = made.json()["data"]
        sid = sandbox["id"]
        try:
            await api.post(f"{a.base}{API}/sandboxes/{sid}/files/write", json={"path": "/workspace/app.py", "content": APP})
            started = await api.post(f"{a.base}{API}/sandboxes/{sid}/processes", json={"cmd": f"python3 /workspace/app.py {PORT}"})
            assert started.status_code == 201, started.text
            assert (await api.post(f"{a.base}{API}/sandboxes/{sid}/expose", json={"port": PORT})).status_code == 200
            token = (await api.post(f"{a.base}{API}/sandboxes/{sid}/preview-token", json={})).json()["data"]["token"]
            host = f"{PORT}-{sandbox['slug']}.sandbox.corral.localhost"
            headers = {"Host": host, "X-Preview-Token": token}
            clients = {where: httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) for where, port in routers.items()}
            results: dict[str, Any] = {}
            try:
                with trio.fail_after(30):
                    while (await clients["relayed"].get("/pixel.png", headers=headers)).status_code != 200:
                        await trio.sleep(0.1)
                times: dict[str, list[float]] = {"direct": [], "relayed": []}
                for i in range(requests + 10):
                    for where in ("direct", "relayed") if i % 2 else ("relayed", "direct"):
                        began = time.perf_counter()
                        answer = await clients[where].get("/pixel.png", headers=headers)
                        elapsed = time.perf_counter() - began
                        assert answer.status_code == 200, answer.text
                        if i >= 10:
                            times[where].append(elapsed)
                results["get"] = compared(times)
            finally:
                for client in clients.values():
                    await client.aclose()
            times = {"direct": [], "relayed": []}
            async with trio.open_nursery() as nursery:
                sockets = {
                    where: await wrap_client_stream(nursery, await trio.open_tcp_stream("127.0.0.1", port), host, "/ws",
                                                    extra_headers=[(b"X-Preview-Token", token.encode())])
                    for where, port in routers.items()
                }
                for i in range(requests + 10):
                    for where in ("direct", "relayed") if i % 2 else ("relayed", "direct"):
                        began = time.perf_counter()
                        await sockets[where].send_message(f"m{i}")
                        assert await sockets[where].get_message() == f"echo: m{i}"
                        if i >= 10:
                            times[where].append(time.perf_counter() - began)
                for ws in sockets.values():
                    await ws.aclose()
                nursery.cancel_scope.cancel()
            results["websocket_echo"] = compared(times)
            return results
        finally:
            await api.delete(f"{a.base}{API}/sandboxes/{sid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests (and messages) through each router")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corral-bench-previews-"))
    routers = {"direct": free_port(), "relayed": free_port()}
    try:
        with postgres_server() as server:
            url = create_database(server, "preview_nodes_bench")
            (work / "a").mkdir()
            (work / "b").mkdir()
            with corral_serve(work / "a", node_env(url, NODES["a"]), "--node-name", "node-a", "--preview-port", str(routers["direct"])) as a, \
                    corral_serve(work / "b", node_env(url, NODES["b"]) | {"CORRAL_WARM_POOL": "0"}, "--node-name", "node-b",
                                 "--preview-port", str(routers["relayed"])) as b:
                results = trio.run(measure, a, b, routers, args.requests)
    finally:
        cleanup_nodes()
    print("a preview through node B's router (relayed to A's) against A's router directly (p50 / p99 ms)")
    for name, row in results.items():
        print(f"  {name:14} direct {row['direct']['p50_ms']:.2f} / {row['direct']['p99_ms']:.2f}   relayed "
              f"{row['relayed']['p50_ms']:.2f} / {row['relayed']['p99_ms']:.2f}   added p50 {row['added_p50_ms']:+.2f} "
              f"p99 {row['added_p99_ms']:+.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
