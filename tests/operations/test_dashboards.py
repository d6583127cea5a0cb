"""The operator files in docs/: the alert rules pass Prometheus's own checker, and every
metric they and the Grafana dashboard name is one a node exposes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.operations.metrics_support import scrape
from tests.support import free_port, running_server

DOCS = Path(__file__).resolve().parents[2] / "docs"
METRIC = re.compile(r"\bcorral_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def named_metrics(text: str) -> set[str]:
    return set(METRIC.findall(text))


def test_the_alert_rules_pass_promtool() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(DOCS / "alerts.yml")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


async def test_every_metric_the_dashboard_and_alerts_use_is_exposed(tmp_path: Path) -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    expressions = json.dumps(dashboard) + (DOCS / "alerts.yml").read_text()
    used = named_metrics(expressions)
    assert len(used) >= 10, used
    async with running_server(tmp_path / "data", metrics_port=free_port()) as api:
        exposed = await scrape(api)
    families = set(exposed.types)  # the parser names a counter's family without `_total`

    def exposed_as(name: str) -> bool:
        bases = {name} | {name.removesuffix(suffix) for suffix in SUFFIXES if name.endswith(suffix)}
        return bool(bases & families) or name in exposed.samples

    missing = sorted(name for name in used if not exposed_as(name))
    assert missing == [], f"named in docs/ but not exposed: {missing}"
