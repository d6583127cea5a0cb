#!/usr/bin/env python3
"""Benchmark of the instance runtime (issue 3, item 7).

Measures, on this machine and in one run, beside baselines:

- create-to-first-exec latency (create an instance, connect to its agent, run `true`),
  p50 and p99 over `--creates` instances; baseline: a bare `unshare ... true`;
- exec round trip of `true` through the agent, p50 and p99; baseline: a local
  `subprocess.run(["true"])`;
- memory (PSS) per idle instance with `--idle` instances running, against the goal of
  issue 28 (`IDLE_PSS_GOAL_MB`, printed last with the mean and p50), and per process
  (init, agent; apart for the `--creates` instances that ran an exec) from
  `/proc/PID/smaps_rollup`; baseline: the PSS of a bare `unshare ... sleep` process tree.

Needs root. Uses its own bridge, address range, nftables table and cgroup parent, and
removes everything it created, also when interrupted. The default template must be
built (it is built on first use otherwise, about 30 s).

    .venv/bin/python tools/bench/sandboxes.py [--creates 50] [--idle 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corral.net import HostNetwork, NetworkConfig
from corral.vm import AgentClient, CgroupV1, InstanceSpec, Limits, NamespaceDriver, TemplateStore

IDLE_PSS_GOAL_MB = 5.0
"""Issue 28: an idle instance (its init and its agent) costs at most this much PSS."""
UNSHARE = ["unshare", "--mount", "--uts", "--ipc", "--pid", "--net", "--fork"]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 99) * 1000, 2),
        "n": len(values),
    }


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rollup_kb(pid: int) -> dict[str, int]:
    """The fields of /proc/PID/smaps_rollup, in kB (empty if the process is gone)."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0])
    except (OSError, ValueError):
        return {}
    return fields


def role(pid: int) -> str:
    """What an instance's process is: its init, its agent, or something it runs."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"
    return name if name in ("corral-init", "corral-agent") else "other"


def breakdown(samples: list[tuple[str, bool, dict[str, int]]]) -> dict[str, dict[str, float]]:
    """Mean PSS and private dirty (MB) per role, apart for instances that ran an exec."""
    groups: dict[str, list[dict[str, int]]] = {}
    for name, exec_ran, fields in samples:
        groups.setdefault(f"{name} ({'after an exec' if exec_ran else 'never exec'})", []).append(fields)
    return {
        key: {
            "n": len(rows),
            "pss": round(statistics.mean(r.get("Pss", 0) for r in rows) / 1024, 2),
            "private_dirty": round(statistics.mean(r.get("Private_Dirty", 0) for r in rows) / 1024, 2),
            "shared": round(statistics.mean(r.get("Shared_Dirty", 0) + r.get("Shared_Clean", 0) for r in rows) / 1024, 2),
        }
        for key, rows in sorted(groups.items())
    }


def tree_pss_kb(root: int) -> int:
    total = pss_kb(root)
    try:
        children = Path(f"/proc/{root}/task/{root}/children").read_text().split()
    except OSError:
        children = []
    return total + sum(tree_pss_kb(int(c)) for c in children)


async def run(args: argparse.Namespace) -> dict[str, object]:
    results: dict[str, object] = {}
    data = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    network = HostNetwork(
        NetworkConfig(
            state_dir=data,
            bridge="corralb0",
            subnet="10.215.0.0/22",
            nft_table="corral_bench",
            link_prefix="cb",
            netns_prefix="corralb-",
        )
    )
    driver = NamespaceDriver(data, TemplateStore(Path(args.template_cache)), network, CgroupV1(parent="corral-bench"))
    if args.python_init:
        driver.zygote.respawn_dir = None  # no native reaper: PID 1 stays in Python
    ids: list[str] = []
    try:
        await driver.templates.ensure("default", progress=lambda line: print("  " + line, file=sys.stderr))
        await network.setup()
        await driver.zygote.warm()

        print("baselines ...", file=sys.stderr)
        results["baseline_subprocess_true"] = summary(timed(lambda: subprocess.run(["true"], check=True), 200))
        results["baseline_unshare_true"] = summary(timed(lambda: subprocess.run([*UNSHARE, "true"], check=True), 50))

        print(f"create-to-first-exec x{args.creates} ...", file=sys.stderr)
        latencies = []
        for _ in range(args.creates):
            start = time.perf_counter()
            info = await driver.create(InstanceSpec(str(uuid.uuid4()), limits=Limits(1, 512, 512)))
            async with AgentClient.for_instance(info) as agent:
                result = await agent.exec("true")
            latencies.append(time.perf_counter() - start)
            assert result.exit_code == 0
            ids.append(info.id)
        results["create_to_first_exec"] = summary(latencies)

        print("exec round trip ...", file=sys.stderr)
        info = await driver.info(ids[0])
        async with AgentClient.for_instance(info) as agent:
            await agent.exec("true")
            rtts = []
            for _ in range(args.execs):
                start = time.perf_counter()
                await agent.exec("true")
                rtts.append(time.perf_counter() - start)
            health = []
            for _ in range(args.execs):
                start = time.perf_counter()
                await agent.health()
                health.append(time.perf_counter() - start)
        results["exec_true_round_trip"] = summary(rtts)
        results["agent_health_round_trip"] = summary(health)

        print(f"{args.idle} idle instances ...", file=sys.stderr)
        while len(ids) < args.idle:
            info = await driver.create(InstanceSpec(str(uuid.uuid4()), limits=Limits(1, 512, 512)))
            ids.append(info.id)
        await trio.sleep(args.settle)
        per_instance = []
        cgroup_usage = []
        samples = []
        for index, instance_id in enumerate(ids):
            pids = driver.cgroups.pids(instance_id)
            rollups = [(role(pid), rollup_kb(pid)) for pid in pids]
            per_instance.append(sum(fields.get("Pss", 0) for _, fields in rollups))
            samples.extend((name, index < args.creates, fields) for name, fields in rollups)
            cgroup_usage.append(driver.cgroups.usage(instance_id)["memory_bytes"] / 1024)
        sleeper = subprocess.Popen([*UNSHARE, "sleep", "60"])
        await trio.sleep(0.3)
        baseline_pss = tree_pss_kb(sleeper.pid)
        sleeper.kill()
        sleeper.wait()
        zygote = driver.zygote._process
        results["idle_instances"] = len(ids)
        results["idle_pss_per_instance_mb"] = {
            "mean": round(statistics.mean(per_instance) / 1024, 2),
            "p50": round(statistics.median(per_instance) / 1024, 2),
            "max": round(max(per_instance) / 1024, 2),
            "goal": IDLE_PSS_GOAL_MB,
            "meets_goal": statistics.mean(per_instance) / 1024 <= IDLE_PSS_GOAL_MB,
        }
        results["idle_pss_by_process_mb"] = breakdown(samples)
        results["idle_cgroup_memory_per_instance_mb"] = round(statistics.mean(cgroup_usage) / 1024, 2)
        results["zygote_pss_mb"] = round(pss_kb(zygote.pid) / 1024, 2) if zygote else None
        results["baseline_unshare_sleep_pss_mb"] = round(baseline_pss / 1024, 2)
    finally:
        print("cleaning up ...", file=sys.stderr)
        with trio.CancelScope(shield=True):
            for instance_id in ids:
                try:
                    await driver.destroy(instance_id)
                except Exception as exc:  # keep cleaning
                    print(f"  destroy {instance_id}: {exc}", file=sys.stderr)
            await network.teardown()
            await driver.aclose()
            network.close()
            for controller in ("cpu", "cpuacct", "memory", "pids"):
                with contextlib.suppress(OSError):
                    os.rmdir(f"/sys/fs/cgroup/{controller}/corral-bench")
            subprocess.run(["rm", "-rf", str(data)], check=False)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=50)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--idle", type=int, default=100)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to let idle instances settle")
    parser.add_argument("--template-cache", default=os.environ.get("CORRAL_TEMPLATE_CACHE", "/var/cache/corral/templates"))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--python-init", action="store_true", help="PID 1 in Python (as without a C compiler), for comparison"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    results = trio.run(run, args)
    text = json.dumps(results, indent=2)
    print(text)
    idle = results["idle_pss_per_instance_mb"]
    assert isinstance(idle, dict)
    print(
        f"idle PSS per instance ({results['idle_instances']} instances, {args.creates} of them after an exec"
        f"{', Python PID 1' if args.python_init else ''}):"
        f" mean {idle['mean']} MB, p50 {idle['p50']} MB; goal <= {IDLE_PSS_GOAL_MB} MB:"
        f" {'met' if idle['meets_goal'] else 'MISSED'}",
        file=sys.stderr,
    )
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
