#!/usr/bin/env python3
"""What comes back when a node dies (issue 30), on three nodes, each in a network
namespace of its own (the integration tests' cluster, `tests/actors/nodes/cluster.py`):

- `kill -9` of a database primary's whole node (its control plane and its servers) to
  its replica on another node, promoted, answering a query at the database's `url`
  (goal: within 30 s), and to the node being `lost` in `GET /admin/nodes` on a survivor;
- `kill -9` of a computer's whole node to the computer `running` again on another node
  from its snapshot (which the bench takes first, after writing `FILES_MB` of random
  bytes in it, and times: ready means kept on two nodes).

Each round kills the node that holds the resource, then starts it again on its data
directory (it destroys what it lost) before the next. Needs root and the default and
desktop templates.

    .venv/bin/python -m tools.bench.node_failover [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio

from corral.vm import TemplateStore
from tests.actors.nodes.cluster import Cluster, Node, three_nodes
from tests.serve_process import ADMIN_KEY
from tests.support import TEMPLATE_CACHE, cleanup_runtime_host

API = "/api/v1"
PROMOTED_GOAL_S = 30.0
FILES_MB = 100
"""What the computer has written before its snapshot (random: nothing to compress)."""
LOST_GOAL_S = 10.0


async def _answer(url: str) -> bool:
    def ask() -> bool:
        with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
            return conn.execute("SELECT count(*) FROM t").fetchall() == [(2,)]
        return False

    return await trio.to_thread.run_sync(ask)


async def _until(seconds: float, check: Any) -> Any:
    with trio.fail_after(seconds):
        while not (found := await check()):
            await trio.sleep(0.05)
        return found


async def _record(client: httpx.AsyncClient, node: Node, path: str) -> dict[str, Any]:
    answer = await client.get(f"{node.base}{API}{path}")
    if answer.status_code != 200:
        return {}
    body: dict[str, Any] = answer.json()
    return dict(body.get("data", body)) if "data" in body and isinstance(body["data"], dict) else body


async def _lost_seen(node: Node, name: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as admin:
        nodes = (await admin.get(f"{node.base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"})).json()["data"]
    return any(n["name"] == name and n["state"] == "lost" for n in nodes)


async def database_round(cluster: Cluster, key: str) -> dict[str, float]:
    """A primary and its replica; the primary's machine killed; the times to `lost` and
    to the promoted replica answering at the database's url."""
    a = cluster.nodes["node-a"]
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        made = (await client.post(f"{a.base}{API}/databases", json={"name": "bench"})).json()["data"]
        did = made["id"]
        primary = await _until(120, lambda: _status(client, a, f"/databases/{did}", "running"))
        home = cluster.nodes[primary["node"]]
        url = (await _record(client, a, f"/databases/{did}/credentials"))["url"]
        with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
            conn.execute("CREATE TABLE t (v int)")
            conn.execute("INSERT INTO t VALUES (1), (2)")
        rid = (await client.post(f"{a.base}{API}/databases/{did}/replicas", json={})).json()["data"]["id"]
        replica = await _until(120, lambda: _status(client, a, f"/databases/{rid}", "running"))
        assert replica["node"] != home.name, replica
        replica_url = (await _record(client, a, f"/databases/{rid}/credentials"))["url"]
        await _until(30, lambda: _answer(replica_url))
        survivor = next(node for node in cluster.nodes.values() if node.name not in (home.name, replica["node"]))

        cluster.kill_machine(home)
        killed = time.monotonic()
        lost_at = promoted_at = 0.0

        async def lost() -> None:
            nonlocal lost_at
            await _until(30, lambda: _lost_seen(survivor, home.name))
            lost_at = time.monotonic()

        async def promoted() -> None:
            nonlocal promoted_at
            record = await _until(60, lambda: _status(client, survivor, f"/databases/{did}", "running", away_from=home.name))
            new_url = (await _record(client, survivor, f"/databases/{did}/credentials"))["url"]
            assert record["node"] == replica["node"], record
            await _until(60, lambda: _answer(new_url))
            promoted_at = time.monotonic()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lost)
            nursery.start_soon(promoted)
        cluster.restart(home)
        await client.delete(f"{survivor.base}{API}/databases/{did}")
    return {"lost_s": lost_at - killed, "promoted_answering_s": promoted_at - killed}


async def computer_round(cluster: Cluster, key: str) -> dict[str, float]:
    """A desktop computer and a snapshot of it; its machine killed; the time to the
    computer running again elsewhere."""
    a = cluster.nodes["node-a"]
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        cid = (await client.post(f"{a.base}{API}/computers", json={"name": "Bench", "template_type": "svc-desktop"})).json()["id"]
        state = await _until(120, lambda: _status(client, a, f"/computers/{cid}", "running"))
        home = cluster.nodes[state["node"]]
        wrote = await client.post(f"{a.base}{API}/computers/{cid}/exec", json={"command": f"head -c {FILES_MB}M /dev/urandom > /root/files.bin"})
        assert wrote.status_code == 200 and wrote.json()["exit_code"] == 0, wrote.text
        asked = time.monotonic()
        sid = (await client.post(f"{a.base}{API}/computers/{cid}/snapshots", json={})).json()["data"]["id"]
        await _until(120, lambda: _status(client, a, f"/computers/{cid}/snapshots/{sid}", "ready"))
        snapshot_ready = time.monotonic() - asked
        survivor = next(node for node in cluster.nodes.values() if node.name != home.name)

        cluster.kill_machine(home)
        killed = time.monotonic()
        await _until(90, lambda: _status(client, survivor, f"/computers/{cid}", "running", away_from=home.name))
        back = time.monotonic() - killed
        cluster.restart(home)
        await client.delete(f"{survivor.base}{API}/computers/{cid}")
    return {"snapshot_ready_s": snapshot_ready, "computer_running_s": back}


async def _status(client: httpx.AsyncClient, node: Node, path: str, status: str, away_from: str | None = None) -> dict[str, Any] | None:
    record = await _record(client, node, path)
    if record.get("status") == "error":
        raise AssertionError(f"{path} is in error: {record}")
    if record.get("status") != status or (away_from is not None and record.get("node") == away_from):
        return None
    return record


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


def measure(rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="corral-bench-failover-"))
    cleanup_runtime_host()
    for template in ("default", "desktop"):
        TemplateStore(TEMPLATE_CACHE).ensure_sync(template, progress=lambda line: None)
    rows: list[dict[str, float]] = []
    with three_nodes(root) as cluster:
        for n in range(rounds):
            key = cluster.owner_key("node-a", f"Failover {n}", f"owner{n}@failover-bench.example")
            rows.append({**trio.run(database_round, cluster, key), **trio.run(computer_round, cluster, key)})
    cleanup_runtime_host()
    return {name: summary([row[name] for row in rows]) for name in rows[0]} | {"rounds": rounds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = measure(args.rounds)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def report(results: dict[str, Any]) -> None:
    def line(name: str) -> str:
        row = results[name]
        return f"p50 {row['p50']:.2f} s (min {row['min']:.2f}, max {row['max']:.2f})"

    lost, promoted = results["lost_s"]["max"], results["promoted_answering_s"]["max"]
    print(f"failover, three nodes in namespaces of their own, {results['rounds']} rounds (kill -9 of the whole node)")
    print(f"  -> lost on a survivor: {line('lost_s')} (goal <= {LOST_GOAL_S:.0f} s: {'met' if lost <= LOST_GOAL_S else 'MISSED'})")
    print(f"  -> promoted replica answering at the database's url: {line('promoted_answering_s')}"
          f" (goal <= {PROMOTED_GOAL_S:.0f} s: {'met' if promoted <= PROMOTED_GOAL_S else 'MISSED'})")
    print(f"  -> computer running again from its snapshot: {line('computer_running_s')}")
    print(f"  snapshot of a desktop computer with {FILES_MB} MB written, ready and kept on two nodes: {line('snapshot_ready_s')}")


if __name__ == "__main__":
    sys.exit(main())
