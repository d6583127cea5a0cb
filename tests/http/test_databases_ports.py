"""A node hands out proxy ports from `CORRAL_DATABASE_PORTS`; when none is left, creating
is `409 DATABASE_PORTS_EXHAUSTED`, and a deleted database's port is free again."""

from __future__ import annotations

import shutil

import pytest

from tests.http.database_support import API, DATABASE_SETTINGS, running_db
from tests.support import (
    DB_PORT_OFFSET,
    FIRST_PORT,
    PORTS_PER_SLOT,
    TEST_SLOT,
    assert_error,
    running_server,
)


async def test_ports_run_out_and_come_back(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    first = FIRST_PORT + TEST_SLOT * PORTS_PER_SLOT + DB_PORT_OFFSET  # this slot's database ports, never handed out otherwise
    settings = {**DATABASE_SETTINGS, "database_ports": f"{first}-{first + 1}"}  # two proxy ports (servers': the next two)
    async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
        root = api.platform.databases.driver.layout.root
        try:
            tenant = await api.create_tenant()
            one = await running_db(api, tenant, name="one")
            await running_db(api, tenant, name="two")
            full = await api.request("POST", f"{API}/databases", key=tenant.key, json={"name": "three"})
            assert_error(full, 409, "DATABASE_PORTS_EXHAUSTED")
            await api.request("DELETE", f"{API}/databases/{one['id']}", key=tenant.key)
            again = await running_db(api, tenant, name="three")
            assert again["id"]
        finally:
            servers = api.platform.databases.driver
            for info in await servers.instances():
                await servers.destroy(info.id)
            await api.platform.databases.access.drop_fast_table()
            shutil.rmtree(root, ignore_errors=True)
