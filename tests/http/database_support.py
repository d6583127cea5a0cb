"""Fixtures and helpers for the database tests: a server whose databases run on real
PostgreSQL servers, proxy ports in this test slot's range, and clients (psycopg)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio

from tests.support import (
    FIRST_PORT,
    PORTS_PER_SLOT,
    RUNTIME_SETTINGS,
    TEST_SLOT,
    Api,
    Tenant,
    running_server,
)

API = "/api/v1"
DB_PORTS = f"{FIRST_PORT + TEST_SLOT * PORTS_PER_SLOT + 1800}-{FIRST_PORT + TEST_SLOT * PORTS_PER_SLOT + 1999}"
DATABASE_SETTINGS: dict[str, Any] = {
    **RUNTIME_SETTINGS,
    "database_ports": DB_PORTS,
    "database_check_seconds": 0.2,
    "regions": "local,eu-west",
}


@pytest.fixture
async def db_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    """A real server with real instances and databases; everything is destroyed afterwards."""
    async with running_server(tmp_path_factory.mktemp("corral"), **DATABASE_SETTINGS) as client:
        platform = client.platform
        try:
            yield client
        finally:
            servers = platform.databases.driver
            for info in await servers.instances():
                await servers.destroy(info.id)
            driver = await platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)
            shutil.rmtree(servers.layout.root, ignore_errors=True)


@pytest.fixture
async def owner(db_api: Api) -> Tenant:
    return await db_api.create_tenant()


async def create_db(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "main")
    response = await api.request("POST", f"{API}/databases", key=tenant.key, json=body)
    assert response.status_code == 202, response.text
    created: dict[str, Any] = response.json()["data"]
    assert created["status"] == "creating"
    return created


async def wait_status(api: Api, tenant: Tenant, database_id: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
    wanted = statuses or ("running",)
    with trio.fail_after(timeout):
        while True:
            response = await api.request("GET", f"{API}/databases/{database_id}", key=tenant.key)
            assert response.status_code == 200, response.text
            record: dict[str, Any] = response.json()["data"]
            if record["status"] in wanted:
                return record
            assert record["status"] != "error", record
            await trio.sleep(0.05)


async def running_db(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    created = await create_db(api, tenant, **body)
    return await wait_status(api, tenant, created["id"])


async def credentials(api: Api, tenant: Tenant, database_id: str) -> dict[str, Any]:
    response = await api.request("GET", f"{API}/databases/{database_id}/credentials", key=tenant.key)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()["data"]
    return found


def _sql(url: str, statements: list[str]) -> list[Any]:
    results: list[Any] = []
    with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
        for statement in statements:
            cursor = conn.execute(statement)
            results.append(cursor.fetchall() if cursor.description else None)
    return results


async def sql(url: str, *statements: str) -> list[Any]:
    """Run statements over one real client connection (psycopg, in a thread)."""
    return await trio.to_thread.run_sync(_sql, url, list(statements))


async def wait_backup(api: Api, tenant: Tenant, database_id: str, backup_id: str, timeout: float = 60) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            response = await api.request("GET", f"{API}/databases/{database_id}/backups/{backup_id}", key=tenant.key)
            assert response.status_code == 200, response.text
            record: dict[str, Any] = response.json()["data"]
            if record["status"] != "running":
                return record
            await trio.sleep(0.1)
