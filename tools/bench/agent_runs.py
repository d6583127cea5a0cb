#!/usr/bin/env python3
"""Benchmark of agent runs (issue 18, item 8), through HTTP on a running sandbox.

Starts `corral serve` in a temporary directory (its own bridge, range, table and
cgroup parent), creates one sandbox and measures, in alternating rounds of one run:

- the overhead of a run: `POST /agent-runs` of a `custom` run of `true` with `wait`
  (create to terminal state, the response being the final record), p50 and p99;
- the baseline beside it: `POST /sandboxes/{id}/exec` of `true`;
- event-stream latency: a run (`wait: false`) whose command prints the host clock
  (`date +%s%N`, the instance shares it) as its last act, followed on
  `GET /agent-runs/{id}/events?stream=true`; the latency is from that print to the
  terminal `command_finished` frame reaching the client.

Goals: run p50 at most 2x the exec p50; stream latency p50 under 50 ms.
Needs root and the default template.

    .venv/bin/python -m tools.bench.agent_runs [--rounds 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tools.bench.api import ADMIN_KEY, VENV_BIN, corral_key, process
from tools.bench.common import free_port, wait_http

NAMES = {
    "CORRAL_BRIDGE": "corralr0",
    "CORRAL_SUBNET": "10.217.0.0/24",
    "CORRAL_NFT_TABLE": "corral_bench_runs",
    "CORRAL_LINK_PREFIX": "cr",
    "CORRAL_NETNS_PREFIX": "corralr-",
    "CORRAL_CGROUP_PARENT": "corral-bench-runs",
}
GOAL_RATIO = 2.0
GOAL_STREAM_P50_MS = 50.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def stats(values_ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values_ms), 2), "p99_ms": round(percentile(values_ms, 99), 2), "n": len(values_ms)}


def terminal_frame_at(client: httpx.Client, run_id: str) -> int:
    """Follow the run's event stream; the wall clock (ns) when `command_finished` arrived."""
    with client.stream("GET", f"/agent-runs/{run_id}/events", params={"stream": "true"}) as response:
        response.raise_for_status()
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line == "" and event in ("command_finished", "failed", "canceled"):
                arrived = time.time_ns()
                if event != "command_finished":
                    raise RuntimeError(f"run {run_id} ended with {event}")
                return arrived
    raise RuntimeError("the stream ended without a terminal event")


def run(base: str, rounds: int) -> dict[str, Any]:
    client = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {corral_key(base)}"}, timeout=120)
    sandbox = client.post("/sandboxes", json={"name": "bench"})
    sandbox.raise_for_status()
    sid = sandbox.json()["data"]["id"]
    while client.get(f"/sandboxes/{sid}").json()["data"]["status"] != "running":
        time.sleep(0.05)

    def exec_true() -> None:
        result = client.post(f"/sandboxes/{sid}/exec", json={"command": "true"}).json()
        assert result["exit_code"] == 0, result

    def run_true() -> None:
        result = client.post("/agent-runs", json={"sandbox_id": sid, "prompt": "bench", "command": "true"}).json()["data"]
        assert result["status"] == "succeeded", result

    for _ in range(3):  # warm both paths
        exec_true()
        run_true()
    execs, runs, stream = [], [], []
    for _ in range(rounds):
        for _name, call, into in (("exec", exec_true, execs), ("run", run_true, runs)):
            start = time.perf_counter()
            call()
            into.append((time.perf_counter() - start) * 1000)
        made = client.post(
            "/agent-runs", json={"sandbox_id": sid, "prompt": "bench", "command": "sleep 0.3; date +%s%N", "wait": False}
        ).json()["data"]
        arrived = terminal_frame_at(client, made["id"])
        printed = int(client.get(f"/agent-runs/{made['id']}").json()["data"]["output"].strip())
        stream.append((arrived - printed) / 1e6)
    client.delete(f"/sandboxes/{sid}")
    results: dict[str, Any] = {
        "sandbox_exec_true": stats(execs),
        "agent_run_true": stats(runs),
        "stream_exit_to_terminal_event": stats(stream),
    }
    results["run_over_exec_p50"] = round(results["agent_run_true"]["p50_ms"] / results["sandbox_exec_true"]["p50_ms"], 2)
    results["goals"] = {
        "run_over_exec_p50_at_most": GOAL_RATIO,
        "run_goal_met": results["run_over_exec_p50"] <= GOAL_RATIO,
        "stream_p50_under_ms": GOAL_STREAM_P50_MS,
        "stream_goal_met": results["stream_exit_to_terminal_event"]["p50_ms"] < GOAL_STREAM_P50_MS,
    }
    return results


def cleanup() -> None:
    """What the server leaves of its network and cgroups once it has stopped."""
    subprocess.run(["ip", "link", "delete", NAMES["CORRAL_BRIDGE"]], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", NAMES["CORRAL_NFT_TABLE"]], capture_output=True)
    subprocess.run(["nft", "delete", "table", "ip", f"{NAMES['CORRAL_NFT_TABLE']}_egress"], capture_output=True)
    for controller in ("cpu", "cpuacct", "memory", "pids"):
        path = Path("/sys/fs/cgroup") / controller / NAMES["CORRAL_CGROUP_PARENT"]
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir():
                    child.rmdir()
            path.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--template-dir", default="/var/cache/corral/templates")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-runs-") as data_dir:
        port = free_port()
        serve = [str(VENV_BIN / "corral"), "serve", "--port", str(port), "--preview-port", str(free_port()),
                 "--data-dir", data_dir, "--log-level", "WARNING"]
        env = {"CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_PREPARE_TEMPLATES": "0", "CORRAL_TEMPLATE_DIR": args.template_dir,
               "CORRAL_EGRESS_PORT": str(free_port()), **NAMES}
        try:
            with process(serve, env):
                base = f"http://127.0.0.1:{port}"
                wait_http(f"{base}/healthz")
                results = run(base, args.rounds)
        finally:
            cleanup()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
