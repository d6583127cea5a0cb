"""`GET /metrics` on the operator port (contract §19) after real API work, read with
prometheus_client's own parser; the listener's setting; bounded labels."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral.cli import build_parser
from corral.config import Settings, SettingsError
from tests.operations.metrics_support import scrape
from tests.support import API, Api, free_port, running_server

ROUTE_ONE = "/api/v1/sandboxes/{id}"


@pytest.fixture
async def metrics_api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_server(tmp_path / "data", metrics_port=free_port()) as api:
        assert api.platform.metrics is not None
        api.platform.metrics.store.min_interval = 0  # every scrape reads the store afresh
        yield api


async def test_unset_port_means_no_listener_and_no_hooks(tmp_path: Path) -> None:
    async with running_server(tmp_path / "data") as api:
        platform = api.platform
        assert platform.settings.metrics_port is None and platform.metrics is None
        assert platform.operation_timings.observers == [] and platform.db.query_observer is None
        assert not [observer for observer in platform.request_observers if "metrics" in repr(observer).lower()]


def test_port_setting_is_validated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for bad in (0, -1, 65536):
        with pytest.raises(SettingsError, match="CORRAL_METRICS_PORT"):
            Settings(data_dir=tmp_path, metrics_port=bad)
    with pytest.raises(SettingsError, match="differ"):
        Settings(data_dir=tmp_path, port=9000, metrics_port=9000)
    monkeypatch.setenv("CORRAL_METRICS_PORT", "nine")
    with pytest.raises(SettingsError, match="CORRAL_METRICS_PORT"):
        Settings.from_env(data_dir=tmp_path)
    monkeypatch.setenv("CORRAL_METRICS_PORT", "9464")
    assert Settings.from_env(data_dir=tmp_path).metrics_port == 9464
    monkeypatch.delenv("CORRAL_METRICS_PORT")
    assert Settings.from_env(data_dir=tmp_path).metrics_port is None
    args = build_parser().parse_args(["serve", "--metrics-port", "9465", "--data-dir", str(tmp_path)])
    assert Settings.from_args(args).metrics_port == 9465


async def test_requests_are_counted_by_route_template(metrics_api: Api) -> None:
    api = metrics_api
    tenant = await api.create_tenant()
    before = await scrape(api)
    ids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(30)]
    for sandbox_id in ids:  # 30 ids, one route: one series
        assert (await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)).status_code == 404
    assert (await api.request("GET", f"{API}/sandboxes", key=tenant.key)).status_code == 200
    after = await scrape(api)

    moved = after.value("corral_http_requests_total", route=ROUTE_ONE, method="GET", status="404") - before.value(
        "corral_http_requests_total", route=ROUTE_ONE, method="GET", status="404"
    )
    assert moved == 30
    listed = after.value("corral_http_requests_total", route=f"{API}/sandboxes", method="GET", status="200")
    assert listed - before.value("corral_http_requests_total", route=f"{API}/sandboxes", method="GET", status="200") == 1
    timed = after.value("corral_http_request_duration_seconds_count", route=ROUTE_ONE, method="GET")
    assert timed - before.value("corral_http_request_duration_seconds_count", route=ROUTE_ONE, method="GET") == 30
    after.check_histogram("corral_http_request_duration_seconds")
    after.check_histogram("corral_store_query_duration_seconds")
    assert after.value("corral_store_query_duration_seconds_count") > before.value("corral_store_query_duration_seconds_count")
    # No id, path or tenant ever becomes a label value.
    for name, series in after.samples.items():
        for labels in series:
            for value in dict(labels).values():
                assert not any(sandbox_id in value for sandbox_id in ids), (name, labels)
                assert tenant.id not in value, (name, labels)
    assert len(after.series("corral_http_requests_total")) < 20
    # The node's capacity and the parts' figures are there from the start.
    assert after.value("corral_node_cpu_cores") >= 1
    assert 0 < after.value("corral_node_disk_free_bytes") <= after.value("corral_node_disk_bytes")
    assert after.value("corral_node_disk_reserve_bytes") == api.platform.settings.disk_reserve_gb * 1024**3
    assert after.value("corral_store_pool_size") >= 1
    assert after.types["corral_actor_restarts"] == "counter" and after.types["corral_instances"] == "gauge"
    assert "corral_instance_launch_failures_total" in after.samples


async def test_the_listener_serves_only_metrics(metrics_api: Api) -> None:
    port = metrics_api.platform.settings.metrics_port
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 404
        assert (await client.post(f"http://127.0.0.1:{port}/metrics")).status_code == 405
        openmetrics = await client.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text"})
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.rstrip().endswith("# EOF")
