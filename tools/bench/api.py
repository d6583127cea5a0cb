"""API throughput: an authenticated GET through Corral beside a raw hypercorn-trio ASGI app.

The baseline is a raw ASGI hello world on hypercorn's trio worker; Corral serves on
its own HTTP/1.1 server (`corral/http/asgi_server.py`), and the same hello world on
that server is shown too, so the run tells the server's cost from Corral's own.
wrk drives them in alternating short rounds at 1 and 16 connections, and the medians
are reported. The ratio of requests per second against raw hypercorn is the figure
to watch (issue 28's goal: at least 0.8 at 1 and 16 connections, and a p99 of at most
15 ms at 16).

    .venv/bin/python -m tools.bench.api [--seconds 3] [--rounds 5] [--observed]

`--observed` runs a second Corral beside the first, with its Prometheus listener
(`CORRAL_METRICS_PORT`, scraped once a round as Prometheus would) and JSON logs at
info (an access line per request), in the same alternating rounds, and prints what
that costs against the plain one (issue 29: under 5%). The two Corrals take turns at
going first within a round, so that neither always runs on the machine's warmer or
cooler side of a round. `--control` runs the second Corral plain as well: the
"cost" it prints is then the bench's own noise floor (an A/A test).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from tools.bench.common import LoadResult, free_port, run_wrk, wait_http

ADMIN_KEY = "msk_a_bench-operator-key-0123456789"
RATIO_GOAL = 0.8
P99_GOAL_MS = 15.0
ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def corral_key(base: str) -> str:
    return platform_key(base, owner_key(base))


def owner_key(base: str) -> str:
    """A new tenant's owner key."""
    response = httpx.post(
        f"{base}/api/v1/admin/tenants",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        json={"name": "bench", "owner_email": "bench@example.test", "owner_password": "bench-password"},
        timeout=30,
    )
    response.raise_for_status()
    return str(response.json()["data"]["api_key"]["key"])


def platform_key(base: str, owner: str) -> str:
    """A platform key of the owner's tenant, so that wrk's load stays below its rate
    limit (30,000 a minute; a user key's is 600)."""
    response = httpx.post(
        f"{base}/api/v1/api-keys",
        headers={"Authorization": f"Bearer {owner}"},
        json={"name": "bench", "key_type": "platform"},
        timeout=30,
    )
    response.raise_for_status()
    return str(response.json()["data"]["key"])


def row(name: str, connections: int, result: LoadResult) -> str:
    return f"{name:<28} {connections:>5} {result.requests_per_second:>10.0f} {result.p50_ms:>9.2f} {result.p99_ms:>9.2f} {result.errors:>7}"


def median_result(results: list[LoadResult]) -> LoadResult:
    def mid(values: list[float]) -> float:
        return statistics.median(values)

    return LoadResult(
        mid([r.requests_per_second for r in results]),
        mid([r.p50_ms for r in results]),
        mid([r.p99_ms for r in results]),
        sum(r.errors for r in results),
    )


def corral_serve(data_dir: str, port: int) -> list[str]:
    return [str(VENV_BIN / "corral"), "serve", "--port", str(port), "--preview-port", str(free_port()), "--data-dir", data_dir]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=3, help="length of one round against one server")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per connection count")
    parser.add_argument(
        "--observed", action="store_true",
        help="also a Corral with metrics (scraped every round) and JSON access logs at info: its cost beside the plain one",
    )
    parser.add_argument(
        "--control", action="store_true",
        help="with --observed: run the second Corral plain too, so that its 'cost' is the bench's noise floor",
    )
    args = parser.parse_args()

    raw_port, api_port, observed_port, metrics_port, lean_port = free_port(), free_port(), free_port(), free_port(), free_port()
    rounds: dict[tuple[str, int], list[LoadResult]] = {}
    ratios: dict[int, list[float]] = {1: [], 16: []}
    costs: dict[int, list[float]] = {1: [], 16: []}
    raw_name, api_name, observed_name = "raw ASGI hello world", "corral GET /api/v1/tenant", "  metrics + json logs"
    lean_name = "  same, on corral's server"
    base_env = {"CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_PREPARE_TEMPLATES": "0"}
    with contextlib.ExitStack() as stack:
        hypercorn = [str(VENV_BIN / "hypercorn"), "--worker-class", "trio", "--bind", f"127.0.0.1:{raw_port}", "tools.bench.raw_asgi:app"]
        stack.enter_context(process(hypercorn, {}))
        stack.enter_context(process([sys.executable, "-m", "tools.bench.raw_asgi", str(lean_port)], {}))
        plain_dir = stack.enter_context(tempfile.TemporaryDirectory())
        stack.enter_context(process(corral_serve(plain_dir, api_port), {**base_env, "CORRAL_LOG_LEVEL": "warning"}))
        servers = [(api_name, f"http://127.0.0.1:{api_port}")]
        if args.observed:
            observed_dir = stack.enter_context(tempfile.TemporaryDirectory())
            observed_env = {**base_env, "CORRAL_METRICS_PORT": str(metrics_port), "CORRAL_LOG_FORMAT": "json", "CORRAL_LOG_LEVEL": "info"}
            if args.control:
                observed_env = {**base_env, "CORRAL_LOG_LEVEL": "warning"}
                observed_name = "  control: plain again"
            stack.enter_context(process(corral_serve(observed_dir, observed_port), observed_env))
            servers.append((observed_name, f"http://127.0.0.1:{observed_port}"))
        raw_url, lean_url = f"http://127.0.0.1:{raw_port}/", f"http://127.0.0.1:{lean_port}/"
        wait_http(raw_url)
        wait_http(lean_url)
        owners: dict[str, str] = {}
        for name, base in servers:
            wait_http(f"{base}/healthz")
            owners[name] = owner_key(base)

        def fresh_key(name: str) -> dict[str, str]:
            """A new platform key a round: one key's 30,000 requests a minute would be
            spent within a few rounds at 16 connections (the 429s then flatter it)."""
            base = dict(servers)[name]
            return {"Authorization": f"Bearer {platform_key(base, owners[name])}"}

        # Alternate short rounds so that the machine's drift hits every server alike.
        for connections in (1, 16):
            for round_number in range(args.rounds):
                raw = run_wrk(raw_url, connections, args.seconds)
                rounds.setdefault((raw_name, connections), []).append(raw)
                rounds.setdefault((lean_name, connections), []).append(run_wrk(lean_url, connections, args.seconds))
                results = {}
                for name, base in servers if round_number % 2 == 0 else servers[::-1]:
                    results[name] = run_wrk(f"{base}/api/v1/tenant", connections, args.seconds, fresh_key(name))
                    rounds.setdefault((name, connections), []).append(results[name])
                ratios[connections].append(results[api_name].requests_per_second / raw.requests_per_second)
                if args.observed:
                    if not args.control:
                        httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).raise_for_status()  # as Prometheus would
                    costs[connections].append(1 - results[observed_name].requests_per_second / results[api_name].requests_per_second)

    print(f"medians of {args.rounds} alternating rounds of {args.seconds} s")
    print(f"{'server':<28} {'conns':>5} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'errors':>7}")
    for (name, connections), results_of in rounds.items():
        print(row(name, connections, median_result(results_of)))
    for connections, values in ratios.items():
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"ratio at {connections:>2} connection(s): {statistics.median(values):.2f} (rounds {spread}; goal >= {RATIO_GOAL:.2f})")
    p99 = median_result(rounds[(api_name, 16)]).p99_ms
    print(f"p99 at 16 connections: {p99:.2f} ms (goal <= {P99_GOAL_MS:.0f} ms: {'met' if p99 <= P99_GOAL_MS else 'MISSED'})")
    for connections, values in costs.items():
        if values:
            cost = statistics.median(values)
            what = "A/A noise floor (plain against plain)" if args.control else "cost of metrics + JSON access logs"
            print(f"{what} at {connections:>2} connection(s): {cost:+.1%} (rounds {min(values):+.1%} to {max(values):+.1%}; goal < 5%: {'met' if cost < 0.05 else 'MISSED'})")


if __name__ == "__main__":
    main()
