#!/usr/bin/env python3
"""What a user's HTTP call costs on top of the runtime under it (issue 28), in one run.

Each row is measured through the API of a real `corral serve` (loopback, a kept-alive
httpx client, as a user's SDK would), beside the runtime alone (an in-process
`NamespaceDriver` on a bridge of its own, talking to the agent directly) and a bare
baseline, p50 and p99:

- create -> first `true` answered, with the warm pool (`CORRAL_WARM_POOL`, default
  sized to the machine) and without it (a second node with `CORRAL_WARM_POOL=0`);
  runtime: create + connect + exec; bare: `unshare ... true`;
- exec `true` round trip; runtime: the agent's; bare: `subprocess.run(["true"])`;
- fork -> the fork answers `true`; runtime: `driver.clone` + exec;
- stop + start -> first exec; runtime: `driver.stop` + `driver.start` + exec;
- pause and resume of a computer (sandboxes have no pause); runtime: `driver.pause`,
  `driver.start` (a thaw);
- `GET /sandboxes/{id}` and `/healthz`.

The two sides are measured in turns (a create of each, ten execs of each, a fork of
each, ...): the machine is shared and its speed drifts within a run by more than the
API's cost, so a runtime figure is only compared with the API figures taken beside it.
The create without a pool has runtime creates of its own, taken beside it.

Goals printed beside the figures: create -> first exec at most 25 ms p50 with the
pool and at most the runtime's plus 10 ms without it; exec within 1 ms of the
runtime's round trip; fork and start within 10 ms of the runtime's. The API's
throughput against raw hypercorn is `tools/bench/api.py` (wrk), desktop click and
screenshot `tools/bench/desktop.py`, databases `tools/bench/databases.py`, the
egress proxy `tools/bench/egress.py`: their own servers, their own runs.

Needs root and the default template (/var/cache/corral/templates, built on first use).

    .venv/bin/python -m tools.bench.http_path [--creates 30] [--execs 200] [--json out.json]
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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import trio

from tools.bench.api import ADMIN_KEY, VENV_BIN, corral_key, process
from tools.bench.common import cleanup_host, free_port, wait_http

UNSHARE = ["unshare", "--mount", "--uts", "--ipc", "--pid", "--net", "--fork"]
TEMPLATES = os.environ.get("CORRAL_TEMPLATE_CACHE", "/var/cache/corral/templates")
NODE_NAMES = {
    "CORRAL_BRIDGE": "corralh0",
    "CORRAL_SUBNET": "10.223.0.0/22",  # apart from every test range and the other benches
    "CORRAL_NFT_TABLE": "corral_bench_http",
    "CORRAL_LINK_PREFIX": "ch",
    "CORRAL_NETNS_PREFIX": "corralh-",
    "CORRAL_CGROUP_PARENT": "corral-bench-http",
}
RUNTIME_NAMES = {
    "CORRAL_BRIDGE": "corralr0",
    "CORRAL_SUBNET": "10.224.0.0/22",
    "CORRAL_NFT_TABLE": "corral_bench_rt",
    "CORRAL_LINK_PREFIX": "cr",
    "CORRAL_NETNS_PREFIX": "corralr-",
    "CORRAL_CGROUP_PARENT": "corral-bench-rt",
}
PAUSE_BETWEEN_CREATES = 0.3
"""Seconds before each create: a user's creates are not back to back, and the pool refills meanwhile."""
EXEC_TURN = 10
"""Execs of one side before the other side's turn."""


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000, 2),
        "n": len(ordered),
    }


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


# -- through the API --------------------------------------------------------------------


@contextlib.contextmanager
def node(pool: int | None) -> Iterator[httpx.Client]:
    """A `corral serve` in a fresh data directory with a tenant's platform key."""
    port = free_port()
    env = {**NODE_NAMES, "CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_TEMPLATE_DIR": TEMPLATES, "CORRAL_PREPARE_TEMPLATES": "0"}
    if pool is not None:
        env["CORRAL_WARM_POOL"] = str(pool)
    with tempfile.TemporaryDirectory() as data_dir:
        serve = [str(VENV_BIN / "corral"), "serve", "--port", str(port), "--preview-port", str(free_port()),
                 "--data-dir", data_dir, "--log-level", "WARNING"]
        try:
            with process(serve, {**env, "CORRAL_EGRESS_PORT": str(free_port())}):
                base = f"http://127.0.0.1:{port}"
                wait_http(f"{base}/healthz")
                key = corral_key(base)
                with httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
                    yield client
        finally:
            cleanup_host(NODE_NAMES)


def ok(response: httpx.Response) -> dict[str, Any]:
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def exec_true(client: httpx.Client, sandbox_id: str) -> None:
    assert ok(client.post(f"/sandboxes/{sandbox_id}/exec", json={"command": "true"}))["exit_code"] == 0


def api_create_to_exec(client: httpx.Client) -> tuple[float, float]:
    """(create -> first exec, create alone) of one sandbox, deleted after."""
    start = time.perf_counter()
    sandbox = ok(client.post("/sandboxes", json={}))["data"]
    answered = time.perf_counter() - start
    exec_true(client, sandbox["id"])
    first = time.perf_counter() - start
    ok(client.delete(f"/sandboxes/{sandbox['id']}"))
    return first, answered


def creates_side_by_side(client: httpx.Client, runtime: RuntimeSide, creates: int) -> dict[str, list[float]]:
    """Creates through the API and of the runtime alone, one after the other, each after
    a pause (a user's creates are not back to back, and a pool refills meanwhile)."""
    out: dict[str, list[float]] = {"api": [], "answered": [], "runtime": []}
    for _ in range(creates):
        time.sleep(PAUSE_BETWEEN_CREATES)
        out["runtime"].append(runtime.call(runtime.create_to_exec))
        time.sleep(PAUSE_BETWEEN_CREATES)
        first, answered = api_create_to_exec(client)
        out["api"].append(first)
        out["answered"].append(answered)
    return out


def wait_pool_full(client: httpx.Client, pool: int) -> None:
    """Creates one sandbox, so the pool is wanted, and gives it time to fill."""
    sandbox = ok(client.post("/sandboxes", json={}))["data"]
    ok(client.delete(f"/sandboxes/{sandbox['id']}"))
    time.sleep(1.0 + 0.15 * pool)


def side_by_side_rows(client: httpx.Client, runtime: RuntimeSide, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(API rows, runtime rows): each API figure measured in turns with the runtime's."""
    api: dict[str, list[float]] = {name: [] for name in ("exec_true", "exec_true_h11", "fork_to_exec", "start_to_exec")}
    alone: dict[str, list[float]] = {name: [] for name in ("exec_true", "fork_to_exec", "start_to_exec", "pause", "resume")}
    sandbox = ok(client.post("/sandboxes", json={}))["data"]
    sid = sandbox["id"]
    exec_true(client, sid)
    runtime.call(runtime.open_api_client, str(client.base_url), client.headers["Authorization"], sid)
    for turn in range(-1, max(1, args.execs // EXEC_TURN)):  # the first turn warms up, unrecorded
        through = timed(lambda: exec_true(client, sid), EXEC_TURN)
        by_h11 = runtime.call(runtime.api_execs, EXEC_TURN)
        by_runtime = runtime.call(runtime.execs, EXEC_TURN)
        if turn >= 0:
            api["exec_true"] += through
            api["exec_true_h11"] += by_h11
            alone["exec_true"] += by_runtime
    rows: dict[str, Any] = {}
    rows["get_sandbox"] = summary(timed(lambda: ok(client.get(f"/sandboxes/{sid}")), args.execs))
    health = str(client.base_url).rstrip("/").replace("/api/v1", "/healthz")
    rows["healthz"] = summary(timed(lambda: client.get(health).raise_for_status(), args.execs))

    for _ in range(args.lifecycle):  # each deleted before the next: the tenant's cap is 10
        alone["fork_to_exec"].append(runtime.call(runtime.fork_to_exec))
        start = time.perf_counter()
        forked = ok(client.post(f"/sandboxes/{sid}/fork"))["data"]
        exec_true(client, forked["id"])
        api["fork_to_exec"].append(time.perf_counter() - start)
        ok(client.delete(f"/sandboxes/{forked['id']}"))

    for _ in range(args.lifecycle):
        alone["start_to_exec"].append(runtime.call(runtime.start_to_exec))
        ok(client.post(f"/sandboxes/{sid}/stop"))
        start = time.perf_counter()
        ok(client.post(f"/sandboxes/{sid}/start"))
        exec_true(client, sid)
        api["start_to_exec"].append(time.perf_counter() - start)
    ok(client.delete(f"/sandboxes/{sid}"))
    rows.update({name: summary(values) for name, values in api.items()})
    rows.update(computer_rows(client, runtime, args, alone))
    return rows, {name: summary(values) for name, values in alone.items()}


def computer_rows(client: httpx.Client, runtime: RuntimeSide, args: argparse.Namespace, alone: dict[str, list[float]]) -> dict[str, Any]:
    """Pause and resume (`start`) of a running computer (sandboxes have no pause), in
    turns with the runtime's pause and thaw (into `alone`)."""
    computer = ok(client.post("/computers", json={"name": "bench", "template_type": "svc-desktop"}))
    cid = computer.get("id") or computer["data"]["id"]
    deadline = time.monotonic() + 180
    while ok(client.get(f"/computers/{cid}")).get("status") != "running":
        if time.monotonic() > deadline:
            raise RuntimeError("the bench computer did not start within 180 s")
        time.sleep(0.2)
    pauses, resumes = [], []
    for _ in range(args.lifecycle):
        paused, resumed = runtime.call(runtime.pause_resume)
        alone["pause"].append(paused)
        alone["resume"].append(resumed)
        start = time.perf_counter()
        ok(client.post(f"/computers/{cid}/pause"))
        pauses.append(time.perf_counter() - start)
        start = time.perf_counter()
        ok(client.post(f"/computers/{cid}/start"))
        resumes.append(time.perf_counter() - start)
    ok(client.delete(f"/computers/{cid}"))
    return {"pause": summary(pauses), "resume": summary(resumes)}


# -- the runtime alone ------------------------------------------------------------------


class RuntimeSide:
    """The runtime alone (an in-process `NamespaceDriver` on a bridge of its own), on a
    trio loop in a thread of its own, so that each of its figures is taken in turns with
    the API's: the machine is shared, and its speed drifts within a run (figures taken
    minutes apart differ by more than the API's cost). Its operations answer their own
    times, measured on its loop; the main thread waits meanwhile. The API's exec through
    the runtime's own h11 client runs on this loop too (`api_execs`)."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="runtime", daemon=True)
        self.ids: list[str] = []

    def __enter__(self) -> RuntimeSide:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise RuntimeError("the runtime side did not start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the main thread, waiting for the side to start
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        from corral.net import HostNetwork, NetworkConfig
        from corral.vm import CgroupV1, NamespaceDriver, TemplateStore

        data = Path(tempfile.mkdtemp(prefix="corral-bench-rt-"))
        names = RUNTIME_NAMES
        self.network = network = HostNetwork(NetworkConfig(
            state_dir=data, bridge=names["CORRAL_BRIDGE"], subnet=names["CORRAL_SUBNET"], nft_table=names["CORRAL_NFT_TABLE"],
            link_prefix=names["CORRAL_LINK_PREFIX"], netns_prefix=names["CORRAL_NETNS_PREFIX"],
        ))
        self.driver = driver = NamespaceDriver(data, TemplateStore(Path(TEMPLATES)), network, CgroupV1(parent=names["CORRAL_CGROUP_PARENT"]))
        self._stop = trio.Event()
        self._agent: Any = None
        self._api: Any = None
        try:
            await driver.templates.ensure("default")
            await network.setup()
            await driver.zygote.warm()
            self.main_id = self.new_id()
            info = await driver.create(self.spec(self.main_id))
            from corral.vm import AgentClient

            self._agent = AgentClient.for_instance(info)
            await self._agent.exec("true")
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
        finally:
            with trio.CancelScope(shield=True):
                for client in (self._agent, self._api):
                    if client is not None:
                        await client.aclose()
                for instance_id in self.ids:
                    with contextlib.suppress(Exception):
                        await driver.destroy(instance_id)
                await network.teardown()
                await driver.aclose()
                network.close()
                cleanup_host(names)
                subprocess.run(["rm", "-rf", str(data)], check=False)

    def new_id(self) -> str:
        instance_id = str(uuid.uuid4())
        self.ids.append(instance_id)
        return instance_id

    @staticmethod
    def spec(instance_id: str) -> Any:
        from corral.vm import SIZES, InstanceSpec

        return InstanceSpec(instance_id, limits=SIZES["small"])

    async def _first_exec(self, info: Any) -> None:
        from corral.vm import AgentClient

        async with AgentClient.for_instance(info) as agent:
            assert (await agent.exec("true")).exit_code == 0

    async def _destroy(self, instance_id: str) -> None:
        await self.driver.destroy(instance_id)
        self.ids.remove(instance_id)

    async def create_to_exec(self) -> float:
        instance_id = self.new_id()
        start = time.perf_counter()
        await self._first_exec(await self.driver.create(self.spec(instance_id)))
        elapsed = time.perf_counter() - start
        await self._destroy(instance_id)
        return elapsed

    async def execs(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await self._agent.exec("true")
            times.append(time.perf_counter() - start)
        return times

    async def fork_to_exec(self) -> float:
        instance_id = self.new_id()
        start = time.perf_counter()
        await self._first_exec(await self.driver.clone(self.main_id, self.spec(instance_id)))
        elapsed = time.perf_counter() - start
        await self._destroy(instance_id)
        return elapsed

    async def start_to_exec(self) -> float:
        from corral.vm import AgentClient

        await self.driver.stop(self.main_id)
        await self._agent.aclose()
        start = time.perf_counter()
        info = await self.driver.start(self.main_id)
        await self._first_exec(info)
        elapsed = time.perf_counter() - start
        self._agent = AgentClient.for_instance(info)
        return elapsed

    async def pause_resume(self) -> tuple[float, float]:
        start = time.perf_counter()
        await self.driver.pause(self.main_id)
        paused = time.perf_counter() - start
        start = time.perf_counter()
        await self.driver.start(self.main_id)
        return paused, time.perf_counter() - start

    async def open_api_client(self, base_url: str, authorization: str, sandbox_id: str) -> None:
        """Exec through the API with the h11 client the runtime's own figure uses (the
        control plane's agent client, pointed at the API): the server's cost without
        httpx's (about 0.4 ms of the httpx figure is the client's)."""
        from urllib.parse import urlsplit

        from corral.vm import AgentClient

        url = urlsplit(base_url)
        self._api_path = f"{url.path.rstrip('/')}/sandboxes/{sandbox_id}/exec"
        self._api = AgentClient(url.hostname, url.port or 80, authorization.removeprefix("Bearer "))

    async def api_execs(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            answer = await self._api._json("POST", self._api_path, json_body={"command": "true"})
            times.append(time.perf_counter() - start)
            assert answer["exit_code"] == 0
        return times


# -- the report ---------------------------------------------------------------------------


def report(results: dict[str, Any]) -> list[str]:
    api, bare, runtime, unpooled = results["api"], results["bare"], results["runtime"], results["api_without_pool"]

    def p50(row: dict[str, float]) -> float:
        return row["p50_ms"]

    lines = [f"{'path':<34} {'API p50/p99 ms':>18} {'runtime p50/p99':>18} {'bare p50':>9}  goal"]

    def line(name: str, through: dict[str, float], alone: dict[str, float] | None, baseline: dict[str, float] | None, goal: str) -> None:
        fmt = lambda row: f"{row['p50_ms']:.2f}/{row['p99_ms']:.2f}" if row else "-"  # noqa: E731
        lines.append(f"{name:<34} {fmt(through):>18} {fmt(alone) if alone else '-':>18} {p50(baseline) if baseline else '-':>9}  {goal}")

    created, rt_created = api["create_to_exec"], runtime["create_to_exec"]
    line("create -> first exec, pool", created, rt_created, bare["unshare_true"],
         f"<= 25 ms: {'met' if p50(created) <= 25 else 'MISSED'}")
    rt_unpooled = results["runtime_without_pool"]["create_to_exec"]
    line("create -> first exec, no pool", unpooled["create_to_exec"], rt_unpooled, bare["unshare_true"],
         f"<= runtime + 10 = {p50(rt_unpooled) + 10:.1f}: {'met' if p50(unpooled['create_to_exec']) <= p50(rt_unpooled) + 10 else 'MISSED'}")
    line("POST /sandboxes answered, pool", api["create_answered"], None, None, "")
    for name, key, slack in (
        ("exec true", "exec_true", 1.0), ("fork -> exec", "fork_to_exec", 10.0), ("start -> exec", "start_to_exec", 10.0),
        ("pause (a computer's)", "pause", 10.0), ("resume (a computer's)", "resume", 10.0),
    ):
        through, alone = api[key], runtime[key]
        baseline = bare["subprocess_true"] if key == "exec_true" else None
        met = p50(through) <= p50(alone) + slack
        line(name, through, alone, baseline, f"<= runtime + {slack:g} = {p50(alone) + slack:.2f}: {'met' if met else 'MISSED'}")
    through, alone = api["exec_true_h11"], runtime["exec_true"]
    line("exec true, the runtime's h11 client", through, alone, bare["subprocess_true"],
         f"<= runtime + 1 = {p50(alone) + 1:.2f}: {'met' if p50(through) <= p50(alone) + 1 else 'MISSED'}")
    line("GET /sandboxes/{id}", api["get_sandbox"], None, None, "")
    line("GET /healthz", api["healthz"], None, None, "")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=30)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--lifecycle", type=int, default=10, help="forks and stop/starts measured")
    parser.add_argument("--pool", type=int, default=None, help="CORRAL_WARM_POOL of the pooled node (default: the machine's)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    results: dict[str, Any] = {}
    print("bare baselines ...", file=sys.stderr)
    results["bare"] = {
        "subprocess_true": summary(timed(lambda: subprocess.run(["true"], check=True), 200)),
        "unshare_true": summary(timed(lambda: subprocess.run([*UNSHARE, "true"], check=True), 50)),
    }
    with RuntimeSide() as runtime:
        print("through the API with the warm pool, in turns with the runtime alone ...", file=sys.stderr)
        with node(args.pool) as client:
            wait_pool_full(client, args.pool or 8)
            creates = creates_side_by_side(client, runtime, args.creates)
            time.sleep(2.0)  # the pool's refills done: they would compete with what follows
            api, alone = side_by_side_rows(client, runtime, args)
            results["api"] = {"create_to_exec": summary(creates["api"]), "create_answered": summary(creates["answered"]), **api}
            results["runtime"] = {"create_to_exec": summary(creates["runtime"]), **alone}
        print("through the API without a pool, in turns with the runtime alone ...", file=sys.stderr)
        with node(0) as client:
            creates = creates_side_by_side(client, runtime, args.creates)
            results["api_without_pool"] = {"create_to_exec": summary(creates["api"])}
            results["runtime_without_pool"] = {"create_to_exec": summary(creates["runtime"])}
    print("\n".join(report(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
