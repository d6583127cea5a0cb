"""Database lifecycle through HTTP with real servers: stop/start keep the data, restart,
resize, move, wake, wrong states, credential rotation, idempotent replays."""

from __future__ import annotations

import time

import psycopg
import pytest
import trio

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


async def post(api: Api, tenant: Tenant, path: str, body: dict[str, object] | None = None, **kwargs: object) -> object:
    return await api.request("POST", f"{API}{path}", key=tenant.key, json=body, **kwargs)  # type: ignore[arg-type]


async def test_stop_keeps_the_data_and_start_brings_it_back(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="keep")
    did = database["id"]
    creds = await credentials(db_api, owner, did)
    await sql(creds["url"], "CREATE TABLE t (v text)", "INSERT INTO t VALUES ('kept')")
    stopped = await db_api.request("POST", f"{API}/databases/{did}/stop", key=owner.key)
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["data"]["status"] == "stopped"
    with pytest.raises(psycopg.OperationalError, match="stopped"):
        await sql(creds["url"], "SELECT 1")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/stop", key=owner.key), 409, "INVALID_STATE")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/restart", key=owner.key), 409, "INVALID_STATE")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/wake", key=owner.key), 409, "INVALID_STATE")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/backups", key=owner.key), 409, "INVALID_STATE")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/replicas", key=owner.key, json={}), 409, "INVALID_STATE")
    started = await db_api.request("POST", f"{API}/databases/{did}/start", key=owner.key)
    assert started.status_code == 200, started.text
    assert started.json()["data"]["status"] == "running"
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [("kept",)]
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/start", key=owner.key), 409, "INVALID_STATE")


async def test_restart_wake_resize_and_move(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="ops")
    did = database["id"]
    assert database["node"] == db_api.platform.settings.node_name  # contract §20
    creds = await credentials(db_api, owner, did)
    await sql(creds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (7)")
    restarted = await db_api.request("POST", f"{API}/databases/{did}/restart", key=owner.key)
    assert restarted.status_code == 200 and restarted.json()["data"]["status"] == "running"
    woken = await db_api.request("POST", f"{API}/databases/{did}/wake", key=owner.key)
    assert woken.status_code == 200 and woken.json()["data"]["status"] == "running"
    assert woken.json()["data"]["updated_at"] == restarted.json()["data"]["updated_at"]  # unchanged
    resized = await db_api.request("POST", f"{API}/databases/{did}/resize-compute", key=owner.key, json={"size": "medium"})
    assert resized.status_code == 200, resized.text
    body = resized.json()["data"]
    assert body["size"] == "medium" and body["vcpus"] == 2 and body["memory_mb"] == 8192 and body["status"] == "running"
    servers = db_api.platform.databases.driver
    state = servers.layout.load(did)
    assert state is not None and state.memory_mb == 8192
    if servers.cgroups is not None:  # the running server's cgroup has the new limit
        limit = (servers.cgroups.path("memory", did) / "memory.limit_in_bytes").read_text()
        assert int(limit) == 8192 * 1024 * 1024
        assert (await servers.info(did)).init_pid in servers.cgroups.pids(did)
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [(7,)]
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/resize-compute", key=owner.key, json={}), 400, "MISSING_PARAM")
    assert_error(
        await db_api.request("POST", f"{API}/databases/{did}/resize-compute", key=owner.key, json={"size": "xl"}), 422, "VALIDATION_ERROR"
    )
    moved = await db_api.request("POST", f"{API}/databases/{did}/move", key=owner.key, json={"region": "eu-west"})
    assert moved.status_code == 200 and moved.json()["data"]["region"] == "eu-west"
    assert_error(
        await db_api.request("POST", f"{API}/databases/{did}/move", key=owner.key, json={"region": "mars"}), 422, "VALIDATION_ERROR"
    )
    # from stopped: the new size is kept for the next start
    await db_api.request("POST", f"{API}/databases/{did}/stop", key=owner.key)
    small = await db_api.request("POST", f"{API}/databases/{did}/resize-compute", key=owner.key, json={"size": "small"})
    assert small.status_code == 200 and small.json()["data"]["status"] == "stopped" and small.json()["data"]["size"] == "small"
    await db_api.request("POST", f"{API}/databases/{did}/start", key=owner.key)
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [(7,)]


async def test_rotation_ends_the_old_password(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="rot")
    old = await credentials(db_api, owner, database["id"])
    await sql(old["url"], "SELECT 1")
    rotated = await db_api.request("POST", f"{API}/databases/{database['id']}/credentials/rotate", key=owner.key)
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["data"]
    assert new["password"] != old["password"] and new["user"] == old["user"]
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        await sql(old["url"], "SELECT 1")
    await sql(new["url"], "SELECT 1")
    assert (await credentials(db_api, owner, database["id"]))["password"] == new["password"]
    # another role than the database's own is refused at the proxy, the admin role included
    for user in ("corral_admin", "postgres"):
        wrong = new["url"].replace(f"//{new['user']}:", f"//{user}:")
        with pytest.raises(psycopg.OperationalError, match=r"not permitted|no pg_hba.conf entry"):
            await sql(wrong, "SELECT 1")


async def test_create_replays_with_the_same_idempotency_key(db_api: Api, owner: Tenant) -> None:
    headers = {"Idempotency-Key": "create-orders-1"}
    first = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "orders"}, headers=headers)
    assert first.status_code == 202, first.text
    second = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "orders"}, headers=headers)
    assert second.status_code == 202, second.text
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert second.json()["data"]["id"] == first.json()["data"]["id"]
    listed = await db_api.request("GET", f"{API}/databases", key=owner.key)
    assert len(listed.json()["data"]) == 1
    reused = await db_api.request("POST", f"{API}/databases", key=owner.key, json={"name": "other"}, headers=headers)
    assert_error(reused, 422, "IDEMPOTENCY_KEY_REUSED")
    await wait_status(db_api, owner, first.json()["data"]["id"])


async def test_suspended_database_wakes_on_connect_in_the_same_connection(db_api: Api, owner: Tenant) -> None:
    created = await create_db(db_api, owner, name="sleepy", auto_suspend_seconds=1)
    await wait_status(db_api, owner, created["id"])
    creds = await credentials(db_api, owner, created["id"])
    await sql(creds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (42)")
    suspended = await wait_status(db_api, owner, created["id"], "suspended", timeout=30)
    assert suspended["status"] == "suspended"
    info = await db_api.platform.databases.driver.info(created["id"])
    assert info.init_pid is None  # the server really stopped
    [rows] = await sql(creds["url"], "SELECT v FROM t")  # wakes it and is served
    assert rows == [(42,)]
    again = await db_api.request("GET", f"{API}/databases/{created['id']}", key=owner.key)
    assert again.json()["data"]["status"] in ("running", "suspended")
    # the wake route does the same
    await wait_status(db_api, owner, created["id"], "suspended", timeout=30)
    woken = await db_api.request("POST", f"{API}/databases/{created['id']}/wake", key=owner.key)
    assert woken.status_code == 200 and woken.json()["data"]["status"] == "running"


async def test_an_open_connection_keeps_it_awake(db_api: Api, owner: Tenant) -> None:
    created = await create_db(db_api, owner, name="busy", auto_suspend_seconds=1)
    await wait_status(db_api, owner, created["id"])
    creds = await credentials(db_api, owner, created["id"])
    def hold() -> None:
        with psycopg.connect(creds["url"], autocommit=True) as conn:
            time.sleep(3)
            conn.execute("SELECT 1")

    await trio.to_thread.run_sync(hold)
    record = (await db_api.request("GET", f"{API}/databases/{created['id']}", key=owner.key)).json()["data"]
    assert record["status"] == "running"


async def test_a_crashed_server_is_restarted_and_says_so(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="crashy", auto_suspend_seconds=0)
    creds = await credentials(db_api, owner, database["id"])
    await sql(creds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (1)")
    await db_api.platform.databases.driver.kill(database["id"])

    with trio.fail_after(30):
        while True:
            await trio.sleep(0.1)
            info = await db_api.platform.databases.driver.info(database["id"])
            record = (await db_api.request("GET", f"{API}/databases/{database['id']}", key=owner.key)).json()["data"]
            if info.init_pid is not None and record["status"] == "running":
                break
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [(1,)]
    logs = await db_api.request("GET", f"{API}/databases/{database['id']}/logs?tail=50", key=owner.key)
    text = "\n".join(line["line"] for line in logs.json()["data"]["lines"])
    assert "exited unexpectedly" in text and "restarted by its supervisor" in text, text
    actor = await db_api.admin("GET", f"{API}/admin/actors/database/{database['id']}")
    assert actor.status_code == 200, actor.text
    assert actor.json()["data"]["details"]["server_restarts"] == 1, text
