#!/usr/bin/env python3
"""What synchronous replication across nodes costs a commit (issue 30), in one run.

A primary with a replica on another node acknowledges a commit once the replica has
flushed it (`corral.actors.databases.replication`). This measures single-row
autocommit inserts on a primary, p50 and p99, in alternating rounds:

- waiting for a replica that streams over TCP into another node's servers (two
  drivers stand for two nodes: their own roots, disks and cgroups);
- waiting for no replica (the replica still streaming): the baseline, the same server
  in the same run.

Over loopback the difference is the replica's receive and flush plus one local round
trip; over a real network add that network's round trip.

Needs root and PostgreSQL 15. Removes everything it made, also when interrupted.

    .venv/bin/python -m tools.bench.replication [--inserts 300] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corral.vm import InstanceSpec, Limits, release_mounts
from corral.vm.postgres import PostgresDriver

ROOTS = (Path("/var/lib/corral/bench-replication-a"), Path("/var/lib/corral/bench-replication-b"))
CGROUPS = ("corral-bench-repl-a", "corral-bench-repl-b")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spec(server_id: str, port: int, **env: str) -> InstanceSpec:
    return InstanceSpec(
        instance_id=server_id, limits=Limits(1, 512, 256), boot_env={"password": "pw"},
        env={"role": "bench", "database": "ledger", "port": str(port), "listen": "127.0.0.1", **env},
    )


def inserts(port: int, count: int) -> list[float]:
    with psycopg.connect(host="127.0.0.1", port=port, user="bench", password="pw", dbname="ledger", autocommit=True) as conn:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            conn.execute("INSERT INTO t VALUES (1)")
            times.append(time.perf_counter() - start)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    for root, group in zip(ROOTS, CGROUPS, strict=True):
        release_mounts(group)
        shutil.rmtree(root, ignore_errors=True)
    primary_node, replica_node = (PostgresDriver(root, group) for root, group in zip(ROOTS, CGROUPS, strict=True))
    primary_node.replication_secret = replica_node.replication_secret = b"bench cluster secret"
    try:
        port = free_port()
        await primary_node.create(spec("primary", port))
        with psycopg.connect(host="127.0.0.1", port=port, user="bench", password="pw", dbname="ledger", autocommit=True) as conn:
            conn.execute("CREATE TABLE t (v int)")
        source = {"replica_of": "primary", "primary_host": "127.0.0.1", "primary_port": str(port)}
        await replica_node.create_replica("primary", spec("replica", free_port(), **source))
        waiting: list[float] = []
        alone: list[float] = []
        for _ in range(args.rounds):
            for replicas, into in (([], alone), (["replica"], waiting)):
                await primary_node.wait_for_replicas("primary", replicas)
                await trio.sleep(0.3)  # the reload
                into += await trio.to_thread.run_sync(inserts, port, args.inserts)
        return {"waiting_for_a_replica": summary(waiting), "waiting_for_none": summary(alone), "inserts": len(waiting)}
    finally:
        with trio.CancelScope(shield=True):
            for driver in (replica_node, primary_node):
                for info in await driver.instances():
                    await driver.destroy(info.id)
            for root in ROOTS:
                shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inserts", type=int, default=300, help="inserts per round and way")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = trio.run(run, args)
    sync, alone = result["waiting_for_a_replica"], result["waiting_for_none"]
    print(
        f"commit, waiting for a replica on another node: p50 {sync['p50_ms']} ms p99 {sync['p99_ms']} ms\n"
        f"commit, waiting for none (baseline):          p50 {alone['p50_ms']} ms p99 {alone['p99_ms']} ms\n"
        f"added p50 {round(sync['p50_ms'] - alone['p50_ms'], 3)} ms over {result['inserts']} inserts each",
        file=sys.stderr,
    )
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
