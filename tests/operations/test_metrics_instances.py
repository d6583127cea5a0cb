"""Instance figures after real work: create, exec and fork of a sandbox on a real runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.operations.metrics_support import scrape
from tests.support import (
    API,
    RUNTIME_SETTINGS,
    Api,
    destroy_instances_and_databases,
    free_port,
    running_server,
)

EXEC_ROUTE = "/api/v1/sandboxes/{id}/exec"


@pytest.fixture
async def metrics_runtime_api(runtime_host: None, tmp_path: Path) -> AsyncIterator[Api]:
    async with running_server(tmp_path / "data", metrics_port=free_port(), **RUNTIME_SETTINGS) as api:
        assert api.platform.metrics is not None
        api.platform.metrics.store.min_interval = 0
        try:
            yield api
        finally:
            await destroy_instances_and_databases(api.platform)


async def test_create_exec_fork_move_the_instance_metrics(metrics_runtime_api: Api) -> None:
    api = metrics_runtime_api
    tenant = await api.create_tenant()
    before = await scrape(api)
    created = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={})
    assert created.status_code == 201, created.text
    sandbox: dict[str, Any] = created.json()["data"]
    assert sandbox["status"] == "running", sandbox
    for command in ("echo one", "exit 3"):
        ran = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/exec", key=tenant.key, json={"command": command})
        assert ran.status_code == 200, ran.text
    forked = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/fork", key=tenant.key)
    assert forked.status_code in (200, 201), forked.text
    after = await scrape(api)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    operations = "corral_instance_operation_duration_seconds_count"
    assert moved(operations, kind="sandbox", operation="create", outcome="ok") == 1
    assert moved(operations, kind="sandbox", operation="exec", outcome="ok") == 2  # exit 3 is still a completed exec
    assert moved(operations, kind="sandbox", operation="fork", outcome="ok") == 1
    after.check_histogram("corral_instance_operation_duration_seconds")
    assert moved("corral_instance_launches_total") == 2  # the sandbox and its fork
    assert after.value("corral_instance_launch_failures_total") == 0
    assert moved("corral_http_requests_total", route=EXEC_ROUTE, method="POST", status="200") == 2
    assert after.value("corral_instances", kind="sandbox", status="running") == 2
    assert after.value("corral_node_instances_running") == 2
    instances = {labels["instance_id"] for labels in after.series("corral_instance_cpu_seconds_total")}
    assert sandbox["id"] in instances and len(instances) == 2
    assert after.value("corral_instance_memory_bytes", instance_id=sandbox["id"]) > 0
    disk_size = after.value("corral_instance_disk_limit_bytes", instance_id=sandbox["id"])
    assert disk_size == api.platform.settings.sandbox_disk_gb * 1024**3
    assert 0 < after.value("corral_instance_disk_bytes", instance_id=sandbox["id"]) < disk_size
    assert after.value("corral_actors", kind="sandbox", status="alive") >= 2
    assert after.value("corral_events_published_total") > before.value("corral_events_published_total")
