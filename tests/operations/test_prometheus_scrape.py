"""As an operator would: a real Prometheus (Debian's package) scrapes a real `corral
serve` at its metrics port with the alert rules of docs/ loaded; after a workload its
query API shows the request counter moved by the requests made, and every rule
evaluates without error against the node's series."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve_process import corral_serve, wait_for, wait_until_answering
from tests.support import free_port

DOCS = Path(__file__).resolve().parents[2] / "docs"
REQUESTS = 25


@contextlib.contextmanager
def prometheus(directory: Path, target: str) -> Iterator[str]:
    """Prometheus scraping `target` every second, the alert rules evaluated every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (tools/install --test installs Debian's package)")
    port = free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {DOCS / 'alerts.yml'}\n"
        f"scrape_configs:\n  - job_name: corral\n    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(directory / "prometheus.log", "wb")  # noqa: SIM115 (closed below, after the process)
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering("ready Prometheus", f"{base}/-/ready", process, directory / "prometheus.log")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def query(base: str, expression: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def test_a_real_prometheus_scrapes_the_node_and_evaluates_the_alert_rules(tmp_path: Path) -> None:
    metrics_port = free_port()
    with corral_serve(tmp_path, {"CORRAL_METRICS_PORT": str(metrics_port)}) as served, prometheus(tmp_path, f"127.0.0.1:{metrics_port}") as base:
        up = wait_for("a successful scrape", lambda: [r for r in query(base, 'up{job="corral"}') if r["value"][1] == "1"])
        assert up[0]["metric"]["instance"] == f"127.0.0.1:{metrics_port}"
        key = served.owner_key("Scraped", "ops@scraped.test")
        for _ in range(REQUESTS):
            assert httpx.get(f"{served.base}/api/v1/tenant", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        counted = 'sum(corral_http_requests_total{route="/api/v1/tenant",method="GET",status="200"})'
        wait_for(f"{REQUESTS} requests counted", lambda: [r for r in query(base, counted) if float(r["value"][1]) == REQUESTS])
        timed = 'sum(corral_http_request_duration_seconds_count{route="/api/v1/tenant"})'
        assert float(query(base, timed)[0]["value"][1]) == REQUESTS

        def evaluated() -> list[dict[str, Any]] | None:
            groups = httpx.get(f"{base}/api/v1/rules", timeout=10).json()["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            return rules if rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules) else None

        rules = wait_for("every rule evaluated", evaluated)
        assert len(rules) >= 5
        assert [rule["name"] for rule in rules if rule["health"] != "ok"] == []
        assert [rule["name"] for rule in rules if rule.get("state") == "firing"] == []  # a healthy idle node pages no one
