#!/usr/bin/env python3
"""Cross-node SSE event latency (issue 30: goal p50 at most 20 ms).

Two real `corral serve` nodes on one throwaway PostgreSQL; a sandbox on node A runs
`true` execs through A (two events each, `sandbox.exec.started` and `.completed`),
while an SSE stream of the sandbox's events is read from node B. An event's latency
is its arrival on B's stream minus its publication on A, the time in its ULID id
(milliseconds, same host clock: it rounds down, so figures are up to 1 ms high).

Two rounds: execs spaced `--gap` apart (each event alone in A's write-behind batch:
the worst case), and back to back (batches fill). Needs root and the default
template; uses host names of its own and removes what it made.

    .venv/bin/python -m tools.bench.node_events [--events 200] [--gap 0.05] [--json out.json]
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

from tests.pg_server import create_database, postgres_server
from tests.serve_process import Served, corral_serve
from tests.sse_client import SseStream, open_sse
from tests.support import TEMPLATE_CACHE, cleanup_host

API = "/api/v1"
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
NODES = {
    "a": {"bridge": "corrbna0", "subnet": "10.221.1.0/24", "nft_table": "corral_bench_na", "link_prefix": "na",
          "netns_prefix": "corrbna-", "cgroup_parent": "corral-bench-na"},
    "b": {"bridge": "corrbnb0", "subnet": "10.221.2.0/24", "nft_table": "corral_bench_nb", "link_prefix": "nb",
          "netns_prefix": "corrbnb-", "cgroup_parent": "corral-bench-nb"},
}


def ulid_seconds(ulid: str) -> float:
    ms = 0
    for char in ulid[:10]:
        ms = ms * 32 + _CROCKFORD.index(char)
    return ms / 1000


def node_env(url: str, names: dict[str, str]) -> dict[str, str]:
    return {
        "CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_TEMPLATE_DIR": str(TEMPLATE_CACHE),
        **{f"CORRAL_{name.upper()}": value for name, value in names.items()},
    }


def cleanup_nodes() -> None:
    """Remove what the bench nodes left on the host (bridges, links, tables, cgroups)."""
    for names in NODES.values():
        cleanup_host(**{name: names[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "events": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


async def read(stream: SseStream, arrivals: list[float], want: int) -> None:
    """Each exec event's latency as it arrives on B's stream."""
    while len(arrivals) < want:
        frame = await stream.next_frame(timeout=30)
        if str(frame.event).startswith("sandbox.exec."):
            arrivals.append(time.time() - ulid_seconds(str(frame.id)))


async def measure(a: Served, b: Served, events: int, gap: float) -> dict[str, Any]:
    key = a.owner_key("Bench node events", "owner@bench-node-events.example")
    bearer = {"Authorization": f"Bearer {key}"}
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        created = await client.post(f"{a.base}{API}/sandboxes", headers=bearer, json={})
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["data"]["id"]
        try:
            async with open_sse(client, f"{b.base}{API}/sandboxes/{sandbox_id}/events", bearer) as stream:
                await stream.wait_connected()
                await trio.sleep(0.5)  # the creation's events may still arrive: let them pass
                for name, spacing in (("spaced", gap), ("back_to_back", 0.0)):
                    arrivals: list[float] = []
                    execs: list[float] = []
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(read, stream, arrivals, events)
                        for _ in range(events // 2):
                            started = time.perf_counter()
                            answer = await client.post(
                                f"{a.base}{API}/sandboxes/{sandbox_id}/exec", headers=bearer, json={"command": "true"}
                            )
                            execs.append(time.perf_counter() - started)
                            assert answer.status_code == 200, answer.text
                            if spacing:
                                await trio.sleep(spacing)
                    results[name] = {**summary(arrivals), "exec_p50_ms": round(statistics.median(execs) * 1000, 2)}
        finally:
            await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}", headers=bearer)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between execs in the spaced round")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corral-bench-node-events-"))
    try:
        with postgres_server() as server:
            url = create_database(server, "node_events")
            (work / "a").mkdir()
            (work / "b").mkdir()
            with corral_serve(work / "a", node_env(url, NODES["a"]), "--node-name", "node-a") as a, corral_serve(
                work / "b", node_env(url, NODES["b"]), "--node-name", "node-b"
            ) as b:
                results = trio.run(measure, a, b, args.events, args.gap)
    finally:
        cleanup_nodes()
    print(f"cross-node SSE event latency, publish on A -> frame on B ({args.events} events a round)")
    for name, figures in results.items():
        print(
            f"  {name:13} p50 {figures['p50_ms']:6.2f} ms   p99 {figures['p99_ms']:6.2f} ms   max {figures['max_ms']:6.2f} ms"
            f"   (an exec through A: p50 {figures['exec_p50_ms']:.2f} ms)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
