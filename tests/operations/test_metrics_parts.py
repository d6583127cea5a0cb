"""`/metrics` after the other parts' real work (issue 29): a webhook delivery to a real
receiver, a sandbox's requests through the node's egress proxy, a suspended database
woken by a client; bounded labels after many ids; sane histograms. Read with
prometheus_client's own parser (`metrics_support`)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.operations.metrics import LATENCY_BUCKETS
from corral.storage import Event
from tests.actors.webhooks.receiver import Receiver
from tests.http.database_support import DATABASE_SETTINGS, create_db, credentials, sql, wait_status
from tests.http.test_sandboxes import create, run
from tests.net.egress_support import INTERNET, internet
from tests.operations.metrics_support import Scrape, moved, scrape, scrape_until
from tests.support import (
    API,
    RUNTIME_SETTINGS,
    Api,
    destroy_instances_and_databases,
    free_port,
    running_server,
)

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
ID_ROUTES = ("sandboxes", "computers", "databases")
OPERATIONS = "corral_instance_operation_duration_seconds_count"


def metered(api: Api) -> Api:
    assert api.platform.metrics is not None
    api.platform.metrics.store.min_interval = 0  # every scrape reads the store afresh
    return api


@pytest.fixture
async def metrics_api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_server(tmp_path / "data", metrics_port=free_port()) as api:
        yield metered(api)


# -- cardinality and histograms -----------------------------------------------------------------


def route_series(found: Scrape, name: str, route: str) -> set[tuple[tuple[str, str], ...]]:
    return {key for key in found.samples.get(name, {}) if ("route", route) in key}


async def test_a_hundred_ids_per_route_add_no_series(metrics_api: Api) -> None:
    api = metrics_api
    tenant = await api.create_tenant()
    routes = {noun: f"{API}/{noun}/{{id}}" for noun in ID_ROUTES}
    asked: list[str] = []

    async def ask(noun: str) -> None:
        resource_id = str(uuid.uuid4())
        asked.append(resource_id)
        response = await api.request("GET", f"{API}/{noun}/{resource_id}", key=tenant.key)
        assert response.status_code == 404, response.text

    for noun in ID_ROUTES:
        await ask(noun)
    first = await scrape(api)
    for noun in ID_ROUTES:
        for _ in range(99):
            await ask(noun)
    last = await scrape(api)

    for noun, route in routes.items():
        assert moved(first, last, "corral_http_requests_total", route=route, method="GET", status="404") == 99
        assert last.value("corral_http_request_duration_seconds_count", route=route, method="GET") == 100
        for name in ("corral_http_requests_total", "corral_http_request_duration_seconds_bucket"):
            assert route_series(first, name, route) == route_series(last, name, route), (noun, name)
        assert len(route_series(last, "corral_http_requests_total", route)) == 1  # GET 404
        assert len(route_series(last, "corral_http_request_duration_seconds_bucket", route)) == len(LATENCY_BUCKETS) + 1
    for name in first.samples.keys() | last.samples.keys():  # no family grew by an id
        assert len(last.samples.get(name, {})) == len(first.samples.get(name, {})), name
    # No id of any kind (asked for, tenant, user, key) is anywhere in the exposition.
    assert not UUID.search(last.text), UUID.search(last.text)
    assert not any(resource_id in last.text for resource_id in asked)
    assert tenant.id not in last.text and tenant.key_id not in last.text


async def test_every_histogram_is_sane(metrics_api: Api) -> None:
    api = metrics_api
    tenant = await api.create_tenant()
    for path in ("/sandboxes", "/computers", "/databases", "/sandboxes/nope"):
        await api.request("GET", f"{API}{path}", key=tenant.key)
    found = await scrape(api)
    histograms = {name for name, kind in found.types.items() if kind == "histogram"}
    assert histograms >= {
        "corral_http_request_duration_seconds",
        "corral_instance_operation_duration_seconds",
        "corral_store_query_duration_seconds",
    }, histograms
    checked = found.check_histograms()  # cumulative, +Inf is the count, sums never negative
    assert {"corral_http_request_duration_seconds", "corral_store_query_duration_seconds"} <= set(checked)
    for name in checked:
        for series, count in found.samples[f"{name}_count"].items():
            if count == 0:
                assert found.samples[f"{name}_sum"][series] == 0, (name, series)


# -- webhooks -------------------------------------------------------------------------------------



@pytest.fixture
async def hooks_api(tmp_path: Path, receiver: Receiver) -> AsyncIterator[Api]:
    async with running_server(
        tmp_path / "data",
        metrics_port=free_port(),
        allow_private_destinations=True,
        ca_bundle=str(receiver.ca_path),
        webhook_retry_scale=0.01,
        webhook_poll_interval=0.1,
    ) as api:
        yield metered(api)


async def test_webhook_deliveries_move_the_attempts(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    receiver.script("/refuses", [500])
    for path in ("/hook", "/refuses"):
        response = await api.request("POST", f"{API}/webhooks", key=tenant.key, json={"url": receiver.url(path), "retry_count": 0})
        assert response.status_code == 201, response.text
    before = await scrape(api)
    attempts = "corral_webhook_attempts_total"
    sandbox_id = str(uuid.uuid4())
    await api.platform.bus.publish(Event("sandbox.created", "sandbox", sandbox_id, {"sandbox_id": sandbox_id}, tenant_id=tenant.id))
    await receiver.wait_for(lambda: len(receiver.requests) == 2)

    def settled(found: Scrape) -> bool:
        return moved(before, found, attempts) >= 2 and found.value("corral_webhook_queue_pending") == 0

    after = await scrape_until(api, settled)
    assert [r.status for r in sorted(receiver.requests, key=lambda r: r.path)] == [200, 500]
    assert moved(before, after, attempts, outcome="delivered") == 1
    assert moved(before, after, attempts, outcome="failed") == 1  # retry_count 0: no second attempt
    assert after.value(attempts, outcome="error") == 0
    assert after.value("corral_webhook_queue_pending") == 0 and after.value("corral_webhook_queue_due") == 0
    assert after.types["corral_webhook_attempts"] == "counter"
    assert sandbox_id not in after.text


# -- egress ---------------------------------------------------------------------------------------


@pytest.fixture
async def egress_api(runtime_host: None, tmp_path: Path) -> AsyncIterator[Api]:
    async with internet(tmp_path) as bundle:
        settings = {**RUNTIME_SETTINGS, "egress_allowed_destinations": (f"{INTERNET}/32",), "ca_bundle": bundle}
        async with running_server(tmp_path / "data", metrics_port=free_port(), **settings) as api:
            try:
                yield metered(api)
            finally:
                await destroy_instances_and_databases(api.platform)


async def test_egress_requests_move_the_decisions_and_the_latency(egress_api: Api) -> None:
    api = egress_api
    tenant = await api.create_tenant()
    sandbox = await create(api, tenant)
    requests, latency = "corral_egress_requests_total", "corral_egress_added_latency_seconds_count"
    before = await scrape(api)

    sent = await run(api, tenant, sandbox["id"], f"curl -sS --noproxy '*' --max-time 10 https://{INTERNET}/metered")
    assert sent["exit_code"] == 0, sent
    assert json.loads(sent["stdout"])["target"] == "/metered"
    allowed = await scrape_until(api, lambda found: moved(before, found, requests, decision="allowed") >= 1)
    refused = await run(api, tenant, sandbox["id"], "curl -sS --max-time 10 http://169.254.169.254/latest/meta-data/")
    assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED"
    after = await scrape_until(api, lambda found: moved(before, found, requests, decision="denied") >= 1)

    assert moved(before, allowed, latency) == 1  # the proxy's own time, before forwarding
    assert moved(before, after, requests, decision="allowed") == 1
    assert moved(before, after, requests, decision="denied") == 1
    assert moved(before, after, requests, decision="failed") == 0
    assert moved(before, after, latency) == 1  # a refused request is never forwarded
    after.check_histogram("corral_egress_added_latency_seconds")
    assert after.value("corral_egress_connections") >= 0
    assert after.types["corral_egress_requests"] == "counter"


# -- databases ------------------------------------------------------------------------------------


@pytest.fixture
async def db_api(runtime_host: None, tmp_path: Path) -> AsyncIterator[Api]:
    async with running_server(tmp_path / "data", metrics_port=free_port(), **DATABASE_SETTINGS) as api:
        try:
            yield metered(api)
        finally:
            await destroy_instances_and_databases(api.platform)


async def test_a_client_waking_a_database_is_one_wake(db_api: Api) -> None:
    api = db_api
    tenant = await api.create_tenant()
    created = await create_db(api, tenant, name="sleepy", auto_suspend_seconds=1)
    await wait_status(api, tenant, created["id"])
    creds = await credentials(api, tenant, created["id"])
    await wait_status(api, tenant, created["id"], "suspended", timeout=30)
    before = await scrape(api)
    assert before.value("corral_database_servers", state="suspended") == 1
    assert before.value("corral_instances", kind="database", status="suspended") == 1

    [rows] = await sql(creds["url"], "SELECT 1")  # the proxy wakes it for this client
    assert rows == [(1,)]
    after = await scrape_until(api, lambda found: moved(before, found, OPERATIONS, kind="database", operation="wake") >= 1)
    assert moved(before, after, OPERATIONS, kind="database", operation="wake", outcome="ok") == 1
    assert moved(before, after, OPERATIONS, kind="database", operation="wake", outcome="error") == 0
    assert after.value("corral_instance_operation_duration_seconds_sum", kind="database", operation="wake") > 0
    after.check_histogram("corral_instance_operation_duration_seconds")
