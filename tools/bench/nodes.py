#!/usr/bin/env python3
"""Several nodes (issue 30), measured in one run on one throwaway PostgreSQL:

- a forwarded request against the same request made directly on the resource's home
  (`GET /sandboxes/{id}` and an exec of `true`, alternated, p50 and p99, and what the
  forward adds; goal: at most 1 ms at p50);
- the SSE event latency across nodes (`tools/bench/node_events.py`: a sandbox on A,
  its event stream read through B; goal: p50 at most 20 ms);
- `kill -9` of a node to its being `lost` in `GET /admin/nodes` (goal: within 10 s);
- what comes back when a node dies, on three nodes in namespaces of their own
  (`tools/bench/node_failover.py`: a promoted replica answering, goal within 30 s; a
  computer running again from its snapshot), `--failover-rounds` times (0: not run);
- placement throughput with two nodes, each with room for `--room` sandboxes
  (`CORRAL_NODE_MAX_INSTANCES`): `--placements` creates at once (16 in flight,
  alternating nodes, spread over tenants so that no tenant's own limit of 10 refuses
  any), the placed ones per second from the first request to the last answer (each a
  real sandbox booted), then as many creates again once both nodes are full, whose
  refusals are placements decided per second (the check under the cluster's lock,
  with no instance booted); and whether any node got more than its room, or a sandbox
  was placed twice. Beside them, the placement transaction alone (check and claim,
  then the claim released), called from this process: one caller, then 8 at once.

Needs root and the default template; uses host names of its own and removes what it made.

    .venv/bin/python -m tools.bench.nodes [--requests 300] [--events 200] [--placements 40] [--room 10]
        [--failover-rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import trio

from corral.actors.nodes import claims, placement
from corral.storage import open_database
from tests.pg_server import create_database, postgres_server
from tests.serve_process import ADMIN_KEY, Served, corral_serve
from tools.bench import node_failover
from tools.bench.api import platform_key
from tools.bench.node_events import NODES, cleanup_nodes, node_env
from tools.bench.node_events import measure as sse_latency

API = "/api/v1"
FORWARD_GOAL_MS = 1.0
SSE_GOAL_MS = 20.0
LOST_GOAL_S = 10.0


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3)}


async def pool_settled(
    client: httpx.AsyncClient, node: Served, name: str, quiet_seconds: float = 6.0, limit: float = 120.0
) -> None:
    """Waits until node `name`'s warm pool, wanted since the first create, has stopped filling
    (its `load.warm_pool` unchanged over three heartbeats): instances booting beside the
    timed requests would be timed with them."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    seen: tuple[int, int] | None = None
    since = started = time.monotonic()
    while time.monotonic() - started < limit:
        nodes = (await client.get(f"{node.base}{API}/admin/nodes", headers=admin)).json()["data"]
        load = next(row["load"] for row in nodes if row["name"] == name)
        now = (load["warm_pool"], load["instances"])
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_seconds:
            return
        await trio.sleep(0.5)


async def forwarded_against_direct(a: Served, b: Served, requests: int) -> dict[str, Any]:
    key = platform_key(a.base, a.owner_key("Bench forwarding", "owner@bench-forwarding.example"))  # 30,000 a minute
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        created = await client.post(f"{a.base}{API}/sandboxes", json={})
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["data"]["id"]
        await pool_settled(client, a, "node-a")
        try:
            for name, method, tail, body in (("get", "GET", "", None), ("exec", "POST", "/exec", {"command": "true"})):
                times: dict[str, list[float]] = {"direct": [], "forwarded": []}
                for i in range(requests + 10):
                    for where, node in (("direct", a), ("forwarded", b)) if i % 2 else (("forwarded", b), ("direct", a)):
                        started = time.perf_counter()
                        answer = await client.request(method, f"{node.base}{API}/sandboxes/{sandbox_id}{tail}", json=body)
                        elapsed = time.perf_counter() - started
                        assert answer.status_code == 200, answer.text
                        if i >= 10:  # the first few warm both connections
                            times[where].append(elapsed)
                direct, forwarded = figures(times["direct"]), figures(times["forwarded"])
                results[name] = {
                    "direct": direct, "forwarded": forwarded,
                    "added_p50_ms": round(forwarded["p50_ms"] - direct["p50_ms"], 3),
                    "added_p99_ms": round(forwarded["p99_ms"] - direct["p99_ms"], 3),
                }
        finally:
            await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")
    return results


PLACEMENT_TENANTS = 4
IN_FLIGHT = 16


async def placement_throughput(a: Served, b: Served, placements: int, room: int) -> dict[str, Any]:
    """`placements` creates at once through both nodes, then as many on full nodes."""
    keys = [platform_key(a.base, a.owner_key(f"Bench placement {n}", f"owner{n}@bench-placement.example")) for n in range(PLACEMENT_TENANTS)]
    limiter = trio.CapacityLimiter(IN_FLIGHT)
    placed: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=IN_FLIGHT * 2)) as client:

        async def burst(count: int) -> tuple[list[httpx.Response], float, list[float]]:
            answers: list[httpx.Response] = []
            latencies: list[float] = []

            async def one(n: int) -> None:
                async with limiter:
                    started = time.perf_counter()
                    answer = await client.post(
                        f"{(a, b)[n % 2].base}{API}/sandboxes", json={},
                        headers={"Authorization": f"Bearer {keys[n % PLACEMENT_TENANTS]}"},
                    )
                    latencies.append(time.perf_counter() - started)
                    answers.append(answer)
                    if answer.status_code == 201:
                        placed.append(answer.json()["data"])

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(count):
                    nursery.start_soon(one, n)
            return answers, time.perf_counter() - started, latencies

        try:
            first, first_wall, first_latencies = await burst(placements)
            full, full_wall, full_latencies = await burst(placements)
            statuses = Counter(answer.status_code for answer in first + full)
            per_node = Counter(row["node"] for row in placed)
            nodes = (await client.get(f"{a.base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"})).json()["data"]
            hosted = {node["name"]: node["resources"] for node in nodes if node["name"] in ("node-a", "node-b")}
            refused_when_full = sum(answer.status_code == 503 for answer in full)
            placed_first = sum(answer.status_code == 201 for answer in first)
            return {
                "attempts": placements, "room_per_node": room, "statuses": dict(statuses),
                "placed_per_node": dict(per_node), "resources_per_node": hosted,
                "exceeded_room": any(count > room for count in [*per_node.values(), *hosted.values()]),
                "placed_twice": len({row["id"] for row in placed}) != len(placed),
                "placed_per_second": round(placed_first / first_wall, 1),
                "create_p50_ms": figures(first_latencies)["p50_ms"],
                "decisions_when_full_per_second": round(refused_when_full / full_wall, 1),
                "refusal_p50_ms": figures(full_latencies)["p50_ms"],
            }
        finally:
            for row in placed:
                await client.delete(f"{a.base}{API}/sandboxes/{row['id']}", headers={"Authorization": f"Bearer {keys[0]}"})


async def claims_alone(url: str, count: int) -> dict[str, float]:
    """Placement's check-and-claim transaction and the claim's release, `count` times:
    one caller, then 8 at once (each places as node-a would)."""
    db = open_database(url)
    rates: dict[str, float] = {}
    try:
        for callers in (1, 8):

            async def caller(share: int) -> None:
                for _ in range(share):
                    placed = await placement.place(db, "node-a", placement.Demand("sandboxes", "small", "default"))
                    await claims.release(db, placed.claim_id)

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(callers):
                    nursery.start_soon(caller, count // callers)
            rates[f"{callers}_caller{'s' if callers > 1 else ''}_per_second"] = round(count // callers * callers / (time.perf_counter() - started), 1)
    finally:
        await db.close()
    return rates


def kill_to_lost(work: Path, url: str, observer: Served) -> float:
    (work / "c").mkdir()
    with corral_serve(work / "c", node_env(url, NODES["b"]) | {"CORRAL_WARM_POOL": "0"}, "--node-name", "node-c") as c:
        time.sleep(2.5)  # a heartbeat or so after joining
        c.process.send_signal(signal.SIGKILL)
        c.process.wait()
        killed = time.monotonic()
        while True:
            nodes = httpx.get(f"{observer.base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
            state = next(n["state"] for n in nodes.json()["data"] if n["name"] == "node-c")
            if state == "lost":
                return time.monotonic() - killed
            time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests of each kind, on each path")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--placements", type=int, default=40, help="creates at once through both nodes (0: not run)")
    parser.add_argument("--room", type=int, default=10, help="sandboxes each node has room for")
    parser.add_argument("--failover-rounds", type=int, default=3, help="node deaths to measure failover over (0: none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corral-bench-nodes-"))
    results: dict[str, Any] = {}
    try:
        with postgres_server() as server:
            url = create_database(server, "nodes_bench")
            (work / "a").mkdir()
            (work / "b").mkdir()
            room = {"CORRAL_NODE_MAX_INSTANCES": str(args.room)}
            with corral_serve(work / "a", node_env(url, NODES["a"]) | room, "--node-name", "node-a") as a, corral_serve(
                work / "b", node_env(url, NODES["b"]) | room | {"CORRAL_WARM_POOL": "0"}, "--node-name", "node-b"
            ) as b:
                results["forwarding"] = trio.run(forwarded_against_direct, a, b, args.requests)
                results["sse_across_nodes"] = trio.run(sse_latency, a, b, args.events, 0.05)
                results["placement_transaction"] = trio.run(claims_alone, url, 400)
                if args.placements > 0:
                    results["placement"] = trio.run(placement_throughput, a, b, args.placements, args.room)
                results["kill_to_lost_s"] = round(kill_to_lost(work, url, a), 2)
    finally:
        cleanup_nodes()
    print("forwarded through node B against direct on node A (p50 / p99 ms)")
    for name, row in results["forwarding"].items():
        met = "met" if row["added_p50_ms"] <= FORWARD_GOAL_MS else "MISSED"
        print(f"  {name:5} direct {row['direct']['p50_ms']:.2f} / {row['direct']['p99_ms']:.2f}   forwarded "
              f"{row['forwarded']['p50_ms']:.2f} / {row['forwarded']['p99_ms']:.2f}   added p50 {row['added_p50_ms']:+.2f} "
              f"p99 {row['added_p99_ms']:+.2f} (goal <= {FORWARD_GOAL_MS} ms at p50: {met})")
    print("SSE event latency, published on A, read through B")
    for name, row in results["sse_across_nodes"].items():
        met = "met" if row["p50_ms"] <= SSE_GOAL_MS else "MISSED"
        print(f"  {name:13} p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms (goal p50 <= {SSE_GOAL_MS:.0f} ms: {met})")
    lost = results["kill_to_lost_s"]
    print(f"kill -9 -> lost: {lost:.2f} s (goal <= {LOST_GOAL_S:.0f} s: {'met' if lost <= LOST_GOAL_S else 'MISSED'})")
    if "placement" in results:
        placing = results["placement"]
        print(f"placement, two nodes with room for {placing['room_per_node']} sandboxes each, {placing['attempts']} creates at once")
        print(f"  placed {placing['placed_per_second']:.1f} a second (each a booted sandbox; create p50 {placing['create_p50_ms']:.1f} ms),"
              f" per node {placing['placed_per_node']}, answers {placing['statuses']}")
        print(f"  on full nodes: {placing['decisions_when_full_per_second']:.1f} placements decided a second (503; p50 {placing['refusal_p50_ms']:.2f} ms)")
        print(f"  a node past its room: {'YES' if placing['exceeded_room'] else 'no'}; a sandbox placed twice: {'YES' if placing['placed_twice'] else 'no'}")
        alone = results["placement_transaction"]
        print(f"  the check-and-claim transaction and its release alone: {alone['1_caller_per_second']:.0f} a second (1 caller),"
              f" {alone['8_callers_per_second']:.0f} (8 at once)")
    if args.failover_rounds > 0:
        results["failover"] = node_failover.measure(args.failover_rounds)
        node_failover.report(results["failover"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
