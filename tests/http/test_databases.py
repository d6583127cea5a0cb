"""Managed databases (contract §13): create, get, list, delete, credentials, with real
PostgreSQL servers and a real client (psycopg) through the connection proxy."""

from __future__ import annotations

import psycopg
import pytest

from tests.http.database_support import (
    API,
    create_db,
    credentials,
    db_api,
    owner,
    running_db,
    sql,
    wait_status,
)
from tests.support import Api, Tenant, assert_error

__all__ = ["db_api", "owner"]


async def test_create_runs_a_real_server_whose_url_takes_a_client(db_api: Api, owner: Tenant) -> None:
    created = await create_db(db_api, owner, name="Orders DB")
    assert created["engine"] == "postgresql" and created["engine_version"] == "15"
    assert created["role"] == "primary" and created["parent_id"] is None and created["primary_id"] is None
    assert created["size"] == "small" and created["vcpus"] == 1 and created["memory_mb"] == 4096
    assert created["auto_suspend_seconds"] == 300
    assert created["workspace_id"] == owner.workspace_id and created["project_id"] == owner.project_id
    running = await wait_status(db_api, owner, created["id"])
    assert running["status"] == "running"
    creds = await credentials(db_api, owner, created["id"])
    assert set(creds) >= {"host", "port", "database", "user", "password", "url", "internal_url", "sslmode"}
    assert creds["url"].startswith("postgresql://") and creds["sslmode"] == "disable"
    await sql(creds["url"], "CREATE TABLE items (id int PRIMARY KEY, name text)", "INSERT INTO items VALUES (1, 'one')")
    [rows] = await sql(creds["url"], "SELECT name FROM items")
    assert rows == [("one",)]
    # the record and the list show it; the password is only in credentials
    got = await db_api.request("GET", f"{API}/databases/{created['id']}", key=owner.key)
    assert got.status_code == 200 and creds["password"] not in got.text
    listed = await db_api.request("GET", f"{API}/databases", key=owner.key)
    assert [d["id"] for d in listed.json()["data"]] == [created["id"]]


async def test_delete_destroys_the_data_and_frees_the_name(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="gone")
    creds = await credentials(db_api, owner, database["id"])
    root = db_api.platform.databases.driver.layout.server_dir(database["id"])
    assert root.exists()
    deleted = await db_api.request("DELETE", f"{API}/databases/{database['id']}", key=owner.key)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["data"] == {"id": database["id"], "status": "deleted"}
    assert not root.exists()
    assert_error(await db_api.request("GET", f"{API}/databases/{database['id']}", key=owner.key), 404, "DATABASE_NOT_FOUND")
    with pytest.raises(psycopg.OperationalError):
        await sql(creds["url"], "SELECT 1")
    again = await running_db(db_api, owner, name="gone")
    assert again["id"] != database["id"]


async def test_create_errors(db_api: Api, owner: Tenant) -> None:
    missing = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"engine": "postgresql"})
    assert_error(missing, 400, "MISSING_PARAM")
    blank = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "  "})
    assert_error(blank, 400, "MISSING_PARAM")
    engine = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "x", "engine": "mysql"})
    assert_error(engine, 422, "VALIDATION_ERROR")
    size = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "x", "size": "huge"})
    assert_error(size, 422, "VALIDATION_ERROR")
    long_name = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "n" * 64})
    assert_error(long_name, 422, "VALIDATION_ERROR")
    body = await db_api.request("POST", f"{API}/databases", key=owner.key, content=b"{not json", headers={"Content-Type": "application/json"})
    assert_error(body, 400, "INVALID_BODY")
    await create_db(db_api, owner, name="n" * 63)
    taken = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "n" * 63})
    assert_error(taken, 409, "DATABASE_NAME_TAKEN")


async def test_auto_suspend_limits(db_api: Api, owner: Tenant) -> None:
    top = await create_db(db_api, owner, name="top", auto_suspend_seconds=7 * 24 * 3600)
    assert top["auto_suspend_seconds"] == 604800
    never = await create_db(db_api, owner, name="never", auto_suspend_seconds=0)
    assert never["auto_suspend_seconds"] == 0
    past = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "p", "auto_suspend_seconds": 604801})
    assert_error(past, 422, "VALIDATION_ERROR")
    negative = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "p", "auto_suspend_seconds": -1})
    assert_error(negative, 422, "VALIDATION_ERROR")


async def test_ids_and_other_tenants(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="mine")
    other = await db_api.create_tenant("Other")
    assert_error(await db_api.request("GET", f"{API}/databases/not-a-uuid", key=owner.key), 400, "INVALID_ID")
    did = database["id"]
    paths = [
        ("GET", f"/databases/{did}"), ("DELETE", f"/databases/{did}"), ("POST", f"/databases/{did}/start"),
        ("POST", f"/databases/{did}/stop"), ("POST", f"/databases/{did}/restart"), ("POST", f"/databases/{did}/wake"),
        ("POST", f"/databases/{did}/resize-compute"), ("POST", f"/databases/{did}/move"),
        ("POST", f"/databases/{did}/branch"), ("POST", f"/databases/{did}/replicas"), ("GET", f"/databases/{did}/replicas"),
        ("POST", f"/databases/{did}/backups"), ("GET", f"/databases/{did}/backups"),
        ("GET", f"/databases/{did}/backups/{did}"), ("POST", f"/databases/{did}/restore"),
        ("GET", f"/databases/{did}/restores"), ("GET", f"/databases/{did}/credentials"),
        ("POST", f"/databases/{did}/credentials/rotate"), ("GET", f"/databases/{did}/logs"),
        ("GET", f"/databases/{did}/logs/stream"), ("GET", f"/databases/{did}/metrics"),
    ]
    bodies = {"resize-compute": {"size": "medium"}, "move": {"region": "local"}, "branch": {"name": "b"}, "restore": {"backup_id": did}}
    for method, path in paths:
        body = next((value for key, value in bodies.items() if path.endswith(key)), None)
        response = await db_api.request(method, f"{API}{path}", key=other.key, json=body)
        assert_error(response, 404, "DATABASE_NOT_FOUND")
    listed = await db_api.request("GET", f"{API}/databases", key=other.key)
    assert listed.json()["data"] == []
    # still there for its owner
    assert (await db_api.request("GET", f"{API}/databases/{did}", key=owner.key)).status_code == 200
