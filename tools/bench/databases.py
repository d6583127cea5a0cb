#!/usr/bin/env python3
"""Benchmark of managed PostgreSQL (issue 17, item 9), through the real API, in one run.

Each figure beside a baseline measured in the same run (a table of the goals, the
figures and the baselines goes to stderr, the whole result as JSON to stdout and `--json`):

- create-to-running, p50 and p99 over `--creates` databases (POST /databases until GET
  says `running`; goal 500 ms); baseline: `initdb` + start of a fresh cluster, what the
  prepared template spares;
- branch of a database holding about `--branch-mb` MB (POST /branch until `running`;
  goal 1 s); baseline: a bare `pg_basebackup` of the same server;
- wake on connect: a client connecting to `url` of a suspended database until its
  first query is answered (goal 500 ms); baseline: the same against a running one;
- `pgbench -S` (select-only) through `url` (the proxy's port: the kernel's fast path
  to a running server) beside direct connections to the server's own TCP port and to
  its Unix socket (goal: at least 0.9x of direct).

Needs root and PostgreSQL 15. Starts a node of its own (own bridge, range, nftables
table, cgroup parent, data directory) and removes everything at the end.

    .venv/bin/python tools/bench/databases.py [--creates 30] [--branch-mb 50] [--pgbench-seconds 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corral.config import Settings
from corral.http import run_api
from corral.node import open_node
from corral.vm.postgres import PG_BIN
from tools.bench.common import free_port

ADMIN = "msk_a_bench-databases-operator-key-0123456789"
API = "/api/v1"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values) * 1000, 1), "p99_ms": round(percentile(values, 99) * 1000, 1), "n": len(values)}


def baseline_initdb(runs: int) -> list[float]:
    """initdb + start + stop of a fresh cluster as `nobody` (what a create without a template costs)."""
    times = []
    for _ in range(runs):
        work = Path(tempfile.mkdtemp(prefix="corral-bench-initdb-", dir="/var/tmp"))
        os.chmod(work, 0o777)

        def as_nobody() -> None:
            os.setgid(65534)
            os.setuid(65534)

        data = work / "data"
        start = time.perf_counter()
        subprocess.run([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "--no-sync", "-E", "UTF8", "--no-locale"],
                       preexec_fn=as_nobody, check=True, capture_output=True)
        subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-s", "-l", str(work / "log"), "-o", f"-k {work} -c listen_addresses=''", "start"],
                       preexec_fn=as_nobody, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
        subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-s", "stop"], preexec_fn=as_nobody, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return times


class Bench:
    def __init__(self, client: httpx.AsyncClient, key: str, platform: Any) -> None:
        self.client = client
        self.key = key
        self.platform = platform

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self.client.request(method, API + path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()["data"]

    async def until(self, database_id: str, status: str, poll: float = 0.2) -> float:
        start = time.perf_counter()
        while True:
            record = await self.call("GET", f"/databases/{database_id}")
            if record["status"] == status:
                return time.perf_counter() - start
            if record["status"] == "error":
                raise RuntimeError(f"database {database_id} failed: {record}")
            await trio.sleep(poll)

    async def post_until_ready(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """POST, then wait for the new database's `database.ready` on the bus (the moment it
        is `running`), so that the API's rate limit does not time the wait."""
        with self.platform.bus.subscribe(types=["database.ready", "database.error"]) as events:
            start = time.perf_counter()
            record = await self.call("POST", path, json=body)
            async for event in events:
                if event.resource_id == record["id"]:
                    if event.type != "database.ready":
                        raise RuntimeError(f"database {record['id']} failed: {event.data}")
                    return record, time.perf_counter() - start
        raise RuntimeError("the bus closed")

    async def create(self, name: str, **body: Any) -> tuple[dict[str, Any], float]:
        return await self.post_until_ready("/databases", {"name": name, **body})


def _query(url: str, sql: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else None


async def query(url: str, sql: str) -> Any:
    return await trio.to_thread.run_sync(_query, url, sql)


def pgbench(args: list[str], password: str) -> float:
    env = {**os.environ, "PGPASSWORD": password}
    result = subprocess.run([str(PG_BIN / "pgbench"), *args], env=env, capture_output=True, text=True, check=True)
    if "-i" in args:
        return 0.0
    for line in result.stdout.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(result.stdout + result.stderr)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    results["baseline_initdb_start"] = summary(baseline_initdb(5))
    data_dir = Path(tempfile.mkdtemp(prefix="corral-bench-db-", dir="/var/tmp"))
    settings = Settings(
        data_dir=data_dir, port=free_port(), preview_port=free_port(), admin_key=ADMIN, egress_proxy=False,
        bridge="corralbd0", subnet="10.219.7.0/24", nft_table="corral_bench_db", link_prefix="cbd",
        netns_prefix="corral-bench-db-", cgroup_parent="corral-bench-db", database_ports="25432-25631",
        database_check_seconds=0.2, prepare_templates=False, idle_check_seconds=60,
    )
    stop = trio.Event()
    try:
        async with open_node(settings) as platform, trio.open_nursery() as nursery:
            await nursery.start(run_api, platform, stop)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{settings.port}", timeout=120) as client:
                tenant = await client.post(f"{API}/admin/tenants", headers={"Authorization": f"Bearer {ADMIN}"},
                                           json={"name": "bench", "owner_email": "bench@example.test", "owner_password": "correct horse battery", "credits": 100000})
                key = tenant.json()["data"]["api_key"]["key"]
                bench = Bench(client, key, platform)
                await platform.databases.driver.prepare_template()
                # 1. create-to-running
                times = []
                for i in range(args.creates):
                    _, seconds = await bench.create(f"c{i}", auto_suspend_seconds=0)
                    times.append(seconds)
                results["create_to_running"] = summary(times)
                results["create_vs_initdb_baseline"] = round(results["create_to_running"]["p50_ms"] / results["baseline_initdb_start"]["p50_ms"], 3)
                # 2. branch of a database of about --branch-mb MB
                source, _ = await bench.create("big", auto_suspend_seconds=0)
                creds = await bench.call("GET", f"/databases/{source['id']}/credentials")
                rows = args.branch_mb * 1024 * 1024 // 1100
                await query(creds["url"], f"CREATE TABLE big AS SELECT g AS id, repeat('x', 1000) AS pad FROM generate_series(1, {rows}) g")
                size = (await query(creds["url"], "SELECT pg_database_size(current_database())"))[0][0]
                branch_times, base_times = [], []
                for i in range(3):
                    _, seconds = await bench.post_until_ready(f"/databases/{source['id']}/branch", {"name": f"b{i}", "auto_suspend_seconds": 0})
                    branch_times.append(seconds)
                    backup_dir = data_dir / f"basebackup-{i}"
                    start = time.perf_counter()
                    subprocess.run([str(PG_BIN / "pg_basebackup"), "-h", str(platform.databases.driver.socket_dir(source["id"])),
                                    "-p", str(platform.databases.driver.port(source["id"])), "-U", "corral_admin", "-D", str(backup_dir), "-X", "stream", "-c", "fast", "--no-sync"], check=True, capture_output=True)
                    base_times.append(time.perf_counter() - start)
                    shutil.rmtree(backup_dir, ignore_errors=True)
                results["branch"] = {**summary(branch_times), "database_bytes": size}
                results["branch_baseline_pg_basebackup"] = summary(base_times)
                # 3. wake on connect
                sleepy, _ = await bench.create("sleepy", auto_suspend_seconds=1)
                screds = await bench.call("GET", f"/databases/{sleepy['id']}/credentials")
                wakes, warm = [], []
                for _ in range(args.wakes):
                    await bench.until(sleepy["id"], "suspended")
                    start = time.perf_counter()
                    await query(screds["url"], "SELECT 1")
                    wakes.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await query(screds["url"], "SELECT 1")
                    warm.append(time.perf_counter() - start)
                results["wake_on_connect_first_query"] = summary(wakes)
                results["connect_first_query_running_baseline"] = summary(warm)
                # 4. pgbench select-only: proxy vs direct socket
                bcreds = await bench.call("GET", f"/databases/{source['id']}/credentials")
                socket_dir = str(platform.databases.driver.socket_dir(source["id"]))
                common = ["-U", bcreds["user"], bcreds["database"]]
                server_port = str(platform.databases.driver.port(source["id"]))
                await trio.to_thread.run_sync(lambda: pgbench(["-i", "-s", "5", "-q", "-h", socket_dir, "-p", server_port, *common], bcreds["password"]))
                load = ["-S", "-c", str(args.clients), "-j", "2", "-T", str(args.pgbench_seconds), "-n"]
                # interleaved rounds, medians: the machine's other load moves between runs
                runs: dict[str, list[float]] = {"socket": [], "tcp": [], "url": []}
                targets = {
                    "socket": ["-h", socket_dir, "-p", server_port],
                    "tcp": ["-h", bcreds["host"], "-p", server_port],
                    "url": ["-h", bcreds["host"], "-p", str(bcreds["port"])],
                }
                for _ in range(args.rounds):
                    for name, target in targets.items():
                        tps = await trio.to_thread.run_sync(pgbench, [*load, *target, *common], bcreds["password"])
                        runs[name].append(tps)
                direct, direct_tcp, proxied = (statistics.median(runs[name]) for name in ("socket", "tcp", "url"))
                results["pgbench_select_only"] = {
                    "direct_tcp_tps": round(direct_tcp, 1), "direct_socket_tps": round(direct, 1), "url_tps": round(proxied, 1),
                    "ratio_vs_direct_tcp": round(proxied / direct_tcp, 3), "ratio_vs_direct_socket": round(proxied / direct, 3),
                    "clients": args.clients, "seconds": args.pgbench_seconds, "rounds": args.rounds,
                    "runs": {name: [round(v, 1) for v in values] for name, values in runs.items()},
                }
                for database in await bench.call("GET", "/databases"):
                    await bench.call("DELETE", f"/databases/{database['id']}")
                shutil.rmtree(platform.databases.driver.layout.root, ignore_errors=True)  # the template cluster too
            stop.set()
    finally:
        subprocess.run(["nft", "delete", "table", "inet", "corral_bench_db"], capture_output=True)
        subprocess.run(["nft", "delete", "table", "ip", "corral_bench_db_db"], capture_output=True)
        subprocess.run(["ip", "link", "delete", "corralbd0"], capture_output=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    return results


GOALS: tuple[tuple[str, str, str, float, str, str], ...] = (
    # (figure, its key, its field, goal, how it compares, the baseline's key)
    ("create -> running p50 (ms)", "create_to_running", "p50_ms", 500.0, "<=", "baseline_initdb_start"),
    ("branch -> running p50 (ms)", "branch", "p50_ms", 1000.0, "<=", "branch_baseline_pg_basebackup"),
    ("wake on connect p50 (ms)", "wake_on_connect_first_query", "p50_ms", 500.0, "<=", "connect_first_query_running_baseline"),
    ("pgbench -S url / direct tcp", "pgbench_select_only", "ratio_vs_direct_tcp", 0.9, ">=", ""),
)


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal with the figure measured and the baseline of the same run beside it."""
    rows = []
    for name, key, field, goal, compare, baseline in GOALS:
        figure = results.get(key, {}).get(field)
        if figure is None:
            continue
        met = figure <= goal if compare == "<=" else figure >= goal
        base = results.get(baseline, {}).get("p50_ms") if baseline else None
        rows.append({"figure": name, "measured": figure, "goal": f"{compare} {goal:g}", "baseline": base, "met": met})
    return rows


def print_goals(rows: list[dict[str, Any]]) -> None:
    print(f"{'figure':32} {'measured':>10} {'goal':>10} {'baseline':>10}  met", file=sys.stderr)
    for row in rows:
        base = "" if row["baseline"] is None else f"{row['baseline']:g}"
        print(f"{row['figure']:32} {row['measured']:>10g} {row['goal']:>10} {base:>10}  {'yes' if row['met'] else 'NO'}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=30)
    parser.add_argument("--branch-mb", type=int, default=50)
    parser.add_argument("--wakes", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--pgbench-seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (database servers run as users of their own)")
    results = trio.run(run, args)
    results["goals"] = goals(results)
    print_goals(results["goals"])
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
