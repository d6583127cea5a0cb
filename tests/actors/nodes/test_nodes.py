"""The cluster's nodes (contract §20): a node registers and renews its heartbeat, an
operator drains it, a node whose heartbeat stops is `lost` within 10 s (real
`corral serve` processes on one real PostgreSQL, one killed with SIGKILL), and a
SQLite store refuses a second node."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from corral.actors.nodes import HEARTBEAT_SECONDS
from corral.config import Settings, SettingsError
from tests.pg_server import create_database
from tests.serve_process import corral_serve, wait_for
from tests.support import (
    ADMIN_KEY,
    RUNTIME_SETTINGS,
    Api,
    Tenant,
    destroy_instances_and_databases,
    free_port,
    running_server,
)

API = "/api/v1"
_databases = itertools.count()


def nodes_of(base: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    return {node["name"]: node for node in answer.json()["data"]}


async def test_a_node_lists_itself_active_and_renews_its_heartbeat(api: Api) -> None:
    listed = await api.admin("GET", f"{API}/admin/nodes")
    assert listed.status_code == 200
    [node] = listed.json()["data"]
    settings = api.platform.settings
    assert (node["name"], node["advertise_url"], node["region"], node["state"]) == (
        settings.node_name, f"http://127.0.0.1:{settings.port}", "local", "active",
    )
    assert node["capacity"]["cores"] == os.cpu_count()
    assert node["capacity"]["memory_mb"] > 0 and node["capacity"]["disk_free_gb"] > 0
    assert node["load"] == {"instances": 0, "warm_pool": 0, "memory_mb_used": node["load"]["memory_mb_used"]} and node["resources"] == 0
    with trio.fail_after(HEARTBEAT_SECONDS * 5):
        while True:
            await trio.sleep(0.2)
            [again] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
            if again["heartbeat_at"] > node["heartbeat_at"]:
                break
    assert again["started_at"] == node["started_at"]


async def test_every_new_resource_names_its_node_and_the_node_counts_it(tmp_path: Path, runtime_host: None) -> None:
    async with running_server(tmp_path / "data", node_name="node-x", **RUNTIME_SETTINGS) as api:
        try:
            tenant = await api.create_tenant()
            created = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={})
            assert created.status_code in (200, 201, 202), created.text
            sandbox_id = created.json()["data"]["id"]
            assert created.json()["data"]["node"] == "node-x"
            [node] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
            assert node["resources"] == 1
            await api.platform.db.execute("UPDATE sandboxes SET node = NULL WHERE id = ?", (sandbox_id,))  # as made before nodes were recorded
        except BaseException:
            await destroy_instances_and_databases(api.platform)
            raise
    async with running_server(tmp_path / "data", node_name="node-y", **RUNTIME_SETTINGS) as api:  # renamed
        try:
            shown = (await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)).json()["data"]
            assert shown["node"] == "node-y"  # a one-node store's records follow its node
            [node] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
            assert (node["name"], node["resources"]) == ("node-y", 1)
            assert (await api.request("DELETE", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)).status_code == 200
            [node] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
            assert node["resources"] == 0
        finally:
            await destroy_instances_and_databases(api.platform)


async def test_a_drained_node_stays_draining_through_its_heartbeats(api: Api, tenant: Tenant) -> None:
    name = api.platform.settings.node_name
    drained = await api.admin("POST", f"{API}/admin/nodes/{name}/drain")
    assert drained.status_code == 200, drained.text
    assert (drained.json()["data"]["name"], drained.json()["data"]["state"]) == (name, "draining")
    again = await api.admin("POST", f"{API}/admin/nodes/{name}/drain")
    assert (again.status_code, again.json()["data"]["state"]) == (200, "draining")
    beat = again.json()["data"]["heartbeat_at"]
    with trio.fail_after(HEARTBEAT_SECONDS * 5):  # a heartbeat later, still draining
        while True:
            await trio.sleep(0.2)
            [node] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
            if node["heartbeat_at"] > beat:
                break
    assert node["state"] == "draining"


async def test_a_draining_node_takes_no_new_instances(api: Api, tenant: Tenant) -> None:
    name = api.platform.settings.node_name
    assert (await api.admin("POST", f"{API}/admin/nodes/{name}/drain")).status_code == 200
    for path, body in ((f"{API}/sandboxes", {}), (f"{API}/databases", {"name": "orders"})):
        refused = await api.request("POST", path, key=tenant.key, json=body)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "SERVICE_UNAVAILABLE" and f"node {name} is draining" in error["message"]
    assert (await api.request("GET", f"{API}/sandboxes", key=tenant.key)).json()["data"] == []  # nothing half-made


async def test_draining_needs_the_admin_key_and_a_known_node(api: Api, tenant: Tenant) -> None:
    name = api.platform.settings.node_name
    missing = await api.admin("POST", f"{API}/admin/nodes/no-such-node/drain")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "NODE_NOT_FOUND")
    for key in (tenant.key, None):
        assert (await api.request("POST", f"{API}/admin/nodes/{name}/drain", key=key)).status_code in (401, 403)
        assert (await api.request("GET", f"{API}/admin/nodes", key=key)).status_code in (401, 403)
    [node] = (await api.admin("GET", f"{API}/admin/nodes")).json()["data"]
    assert node["state"] == "active"


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"node_name": "-leading-dash"}, "CORRAL_NODE_NAME"),
        ({"node_name": "a" * 64}, "CORRAL_NODE_NAME"),
        ({"advertise_url": "ftp://node-a:21"}, "CORRAL_ADVERTISE_URL"),
        ({"advertise_url": "http://node-a:8080/api"}, "CORRAL_ADVERTISE_URL"),
        ({"node_region": "mars"}, "CORRAL_NODE_REGION"),
    ],
)
def test_a_node_name_address_or_region_that_cannot_work_is_refused(tmp_path: Path, values: dict[str, str], complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint):
        Settings(data_dir=tmp_path, regions="eu-west,us-east", **values)
    settled = Settings(data_dir=tmp_path, regions="eu-west,us-east", host="10.0.0.5", port=9000, node_name="node-a.example")
    assert (settled.node_name, settled.advertise_url, settled.node_region) == ("node-a.example", "http://10.0.0.5:9000", "eu-west")


def test_a_sqlite_store_refuses_a_second_node_until_the_first_has_stopped(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    quiet = {"CORRAL_EGRESS_PROXY": "0"}
    with corral_serve(tmp_path, quiet, "--node-name", "node-a", data_dir=data_dir, log_name="a.log") as first:
        assert list(nodes_of(first.base)) == ["node-a"]
        second = subprocess.run(
            [sys.executable, "-m", "corral", "serve", "--port", str(free_port()), "--preview-port", str(free_port()),
             "--data-dir", str(data_dir), "--node-name", "node-b"],
            env={**os.environ, "CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_PREPARE_TEMPLATES": "0", **quiet},
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 2, second.stderr
        assert "served by node 'node-a'" in second.stderr and "PostgreSQL" in second.stderr
        assert "Traceback" not in second.stderr
        assert list(nodes_of(first.base)) == ["node-a"]
    # node-a stopped cleanly: it left, and the store is free at once (no waiting for its heartbeat to go stale)
    with corral_serve(tmp_path, quiet, "--node-name", "node-b", data_dir=data_dir, log_name="b.log") as renamed:
        assert list(nodes_of(renamed.base)) == ["node-b"]  # a one-node store keeps no row of a name it lost


def test_nodes_on_one_postgresql_see_each_other_and_a_killed_one_is_lost_within_10_s(tmp_path: Path, postgres_url: str) -> None:
    url = create_database(postgres_url, f"nodes_{os.getpid()}_{next(_databases)}")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_REGIONS": "eu-west,us-east"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with corral_serve(tmp_path / "a", common, "--node-name", "node-a") as a, corral_serve(
        tmp_path / "b", {**common, "CORRAL_NODE_REGION": "us-east"}, "--node-name", "node-b", "--advertise", "http://10.9.8.7:8080"
    ) as b:
        both = wait_for("both nodes", lambda: seen if len(seen := nodes_of(a.base)) == 2 else None)
        assert both["node-b"]["advertise_url"] == "http://10.9.8.7:8080" and both["node-b"]["region"] == "us-east"
        assert both["node-a"]["region"] == "eu-west"
        assert {node["state"] for node in both.values()} == {"active"}
        assert nodes_of(b.base).keys() == both.keys()  # any node answers for all

        drained = httpx.post(f"{b.base}{API}/admin/nodes/node-a/drain", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert (drained.status_code, drained.json()["data"]["state"]) == (200, "draining")  # one node drains another
        assert nodes_of(a.base)["node-a"]["state"] == "draining"

        b.process.send_signal(signal.SIGKILL)
        b.process.wait()
        killed_at = time.monotonic()
        wait_for("node-b lost", lambda: nodes_of(a.base)["node-b"]["state"] == "lost", seconds=30)
        assert time.monotonic() - killed_at < 10
        assert nodes_of(a.base)["node-a"]["state"] == "draining"  # alive, and still drained

    with corral_serve(tmp_path / "b", common, "--node-name", "node-b", log_name="again.log") as back:
        node = nodes_of(back.base)["node-b"]
        assert node["state"] == "active" and node["started_at"] > both["node-b"]["started_at"]
        assert nodes_of(back.base)["node-a"]["state"] == "lost"  # stopped cleanly: lost at once
        assert node["region"] == "eu-west"  # what this run was given
