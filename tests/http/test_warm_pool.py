"""The warm pool (contract §19, `CORRAL_WARM_POOL`): creates take booted instances,
which carry nothing of anyone; the pool refills, keeps the memory reserve and empties
when the node stops. The sandbox contract tests run here again on a pooled node."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.actors.sandboxes import WarmPool, sandbox_spec
from corral.config import Settings, SettingsError, default_warm_pool
from corral.ids import new_uuid
from tests.http.test_sandboxes import *  # noqa: F403  (the contract of create, on a pooled node)
from tests.http.test_sandboxes import create, run
from tests.support import (
    RUNTIME_SETTINGS,
    Api,
    Tenant,
    destroy_instances_and_databases,
    running_server,
)

POOL = 2


@contextlib.asynccontextmanager
async def pooled_server(data_dir: Path, **overrides: Any) -> AsyncIterator[Api]:
    async with running_server(data_dir, **{**RUNTIME_SETTINGS, "warm_pool": POOL, **overrides}) as api:
        try:
            yield api
        finally:
            await destroy_instances_and_databases(api.platform)


@pytest.fixture
async def runtime_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    """A node with a warm pool (this module's tests and those of test_sandboxes)."""
    async with pooled_server(tmp_path_factory.mktemp("pooled")) as api:
        await full(pool_of(api))
        yield api


def pool_of(api: Api) -> WarmPool:
    pool = api.platform.warm_pool
    assert pool is not None
    return pool


async def full(pool: WarmPool, size: str = "small", timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while pool.stats("default", size).ready < POOL:
            await trio.sleep(0.05)


async def test_a_create_takes_a_pooled_instance_and_the_pool_refills(runtime_api: Api, owner: Tenant) -> None:
    pool = pool_of(runtime_api)
    pooled = set(pool.pooled_ids())
    sandbox = await create(runtime_api, owner)
    assert sandbox["status"] == "running"
    assert sandbox["id"] in pooled and sandbox["id"] not in pool.pooled_ids()
    assert (await run(runtime_api, owner, sandbox["id"], "hostname"))["stdout"].strip() == f"sbx-{sandbox['id'][:8]}"
    await full(pool)
    assert pool.stats().taken == 1
    # A size nobody asked for yet is pooled from its first create on.
    medium = await create(runtime_api, owner, size="medium")
    assert medium["status"] == "running" and medium["id"] not in pooled
    await full(pool, "medium")
    assert (await create(runtime_api, owner, size="medium"))["id"] not in pool.pooled_ids()


async def test_a_pooled_instance_holds_nothing_of_an_earlier_tenant(runtime_api: Api, owner: Tenant) -> None:
    other = await runtime_api.create_tenant("Other")
    first = await create(runtime_api, owner, env={"SECRET_TOKEN": "tenant-a-secret"})
    await run(runtime_api, owner, first["id"], "echo tenant-a > /root/mine; echo x > /tmp/mine; sleep 300 &")
    assert (await runtime_api.request("DELETE", f"/api/v1/sandboxes/{first['id']}", key=owner.key)).status_code == 200
    await full(pool_of(runtime_api))
    second = await create(runtime_api, other)
    assert second["id"] != first["id"]
    seen = await run(
        runtime_api, other, second["id"],
        "cat /root/mine /tmp/mine 2>&1; env; ps -eo args; ls /root /tmp",
    )
    assert "tenant-a" not in seen["stdout"] and "tenant-a-secret" not in seen["stdout"]
    assert "No such file" in seen["stdout"] and "sleep 300" not in seen["stdout"]
    # And the first tenant's sandbox id never comes back.
    assert (await runtime_api.request("GET", f"/api/v1/sandboxes/{first['id']}", key=other.key)).status_code == 404


async def test_pooled_sandboxes_stop_start_fork_and_get_their_policy(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    await run(runtime_api, owner, sid, "echo kept > /root/file")
    policy = {"mode": "denylist", "rules": [{"host": "192.0.2.0/24"}]}
    assert (await runtime_api.request("PUT", f"/api/v1/sandboxes/{sid}/network-policy", key=owner.key, json=policy)).status_code == 200
    for action in ("stop", "start"):
        response = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/{action}", key=owner.key)
        assert response.status_code == 200, response.text
    assert (await run(runtime_api, owner, sid, "cat /root/file"))["stdout"] == "kept\n"
    fork = await runtime_api.request("POST", f"/api/v1/sandboxes/{sid}/fork", key=owner.key)
    assert fork.status_code == 201, fork.text
    assert (await run(runtime_api, owner, fork.json()["data"]["id"], "cat /root/file"))["stdout"] == "kept\n"


async def test_the_pool_keeps_the_memory_reserve(runtime_host: None, tmp_path: Path) -> None:
    async with pooled_server(tmp_path / "node", memory_reserve_mb=10**9) as api:
        pool = pool_of(api)
        await trio.sleep(1.0)
        assert pool.stats().ready == 0 and pool.stats().booting == 0
        tenant = await api.create_tenant()
        sandbox = await create(api, tenant)  # made fresh, as without a pool
        assert sandbox["status"] == "running" and (await run(api, tenant, sandbox["id"], "echo ok"))["stdout"] == "ok\n"
        assert pool.stats().ready == 0


async def test_the_pool_empties_when_the_node_stops(runtime_host: None, tmp_path: Path) -> None:
    async with pooled_server(tmp_path / "node") as api:
        pool = pool_of(api)
        tenant = await api.create_tenant()
        kept = await create(api, tenant)
        await full(pool)
        pooled = pool.pooled_ids()
        driver = await api.platform.runtime.driver()
        instances_dir = Path(api.platform.settings.data_dir) / "instances"
        assert all((instances_dir / instance_id).exists() for instance_id in pooled)
        await pool.stop()
        assert pool.pooled_ids() == []
        assert not any((instances_dir / instance_id).exists() for instance_id in pooled)
        assert [info.id for info in await driver.instances()] == [kept["id"]]  # the taken one stays


async def test_a_node_that_died_destroys_its_leftover_pool(runtime_host: None, tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    leftover = new_uuid()
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:  # stops leaving its instances, as a dead node would
        driver = await api.platform.runtime.driver()
        await driver.create(sandbox_spec(api.platform.settings, leftover, "default", "small"))
        (data_dir / "pool.json").write_text(f'["{leftover}"]')
    async with pooled_server(data_dir) as api:
        assert leftover not in [info.id for info in await (await api.platform.runtime.driver()).instances()]
        await full(pool_of(api))


def test_the_setting_defaults_to_the_machine_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRAL_WARM_POOL", raising=False)
    assert Settings.from_env().warm_pool == default_warm_pool() >= 2
    for value, expected in (("0", 0), ("64", 64)):
        monkeypatch.setenv("CORRAL_WARM_POOL", value)
        assert Settings.from_env().warm_pool == expected
    for bad in ("-1", "65", "many"):
        monkeypatch.setenv("CORRAL_WARM_POOL", bad)
        with pytest.raises(SettingsError, match="CORRAL_WARM_POOL"):
            Settings.from_env()
