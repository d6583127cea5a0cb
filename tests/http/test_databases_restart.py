"""Databases outlive a restart of the control plane: their servers keep running, and the
next node re-adopts them (listeners, fast path, supervision)."""

from __future__ import annotations

import shutil

import pytest

from tests.http.database_support import (
    API,
    DATABASE_SETTINGS,
    credentials,
    running_db,
    sql,
    wait_status,
)
from tests.support import running_server


async def test_a_running_database_survives_a_control_plane_restart(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    data_dir = tmp_path_factory.mktemp("corral")
    async with running_server(data_dir, **DATABASE_SETTINGS) as api:
        tenant = await api.create_tenant()
        database = await running_db(api, tenant, name="durable", auto_suspend_seconds=0)
        creds = await credentials(api, tenant, database["id"])
        await sql(creds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (9)")
        root = api.platform.databases.driver.layout.root
        pid = (await api.platform.databases.driver.info(database["id"])).init_pid
    try:
        async with running_server(data_dir, **DATABASE_SETTINGS) as api:
            servers = api.platform.databases.driver
            assert (await servers.info(database["id"])).init_pid == pid  # the same server, never restarted
            record = await wait_status(api, tenant, database["id"])
            assert record["status"] == "running"
            [rows] = await sql(creds["url"], "SELECT v FROM t")
            assert rows == [(9,)]
            stopped = await api.request("POST", f"{API}/databases/{database['id']}/stop", key=tenant.key)
            assert stopped.status_code == 200, stopped.text
            started = await api.request("POST", f"{API}/databases/{database['id']}/start", key=tenant.key)
            assert started.json()["data"]["status"] == "running"
            [rows] = await sql(creds["url"], "SELECT v FROM t")
            assert rows == [(9,)]
            for info in await servers.instances():
                await servers.destroy(info.id)
            await api.platform.databases.access.drop_fast_table()
    finally:
        shutil.rmtree(root, ignore_errors=True)
