"""The databases part on a PostgreSQL control-plane store (the production store), not only
SQLite: rows, sealed passwords (BYTEA), backups and restores."""

from __future__ import annotations

import itertools
import shutil

import pytest

from tests.http.database_support import (
    API,
    DATABASE_SETTINGS,
    credentials,
    running_db,
    sql,
    wait_backup,
)
from tests.pg_server import create_database
from tests.support import running_server

_names = itertools.count()


async def test_databases_on_a_postgresql_store(runtime_host: None, postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    url = create_database(postgres_url, f"dbstore_{next(_names)}")
    async with running_server(tmp_path_factory.mktemp("corral"), database_url=url, **DATABASE_SETTINGS) as api:
        root = api.platform.databases.driver.layout.root
        try:
            tenant = await api.create_tenant()
            database = await running_db(api, tenant, name="on pg")
            creds = await credentials(api, tenant, database["id"])
            await sql(creds["url"], "CREATE TABLE t AS SELECT 1 AS v")
            backup = (await api.request("POST", f"{API}/databases/{database['id']}/backups", key=tenant.key)).json()["data"]
            assert (await wait_backup(api, tenant, database["id"], backup["id"]))["status"] == "completed"
            rotated = await api.request("POST", f"{API}/databases/{database['id']}/credentials/rotate", key=tenant.key)
            assert rotated.status_code == 200
            await sql(rotated.json()["data"]["url"], "SELECT 1")
        finally:
            servers = api.platform.databases.driver
            for info in await servers.instances():
                await servers.destroy(info.id)
            await api.platform.databases.access.drop_fast_table()
            shutil.rmtree(root, ignore_errors=True)
