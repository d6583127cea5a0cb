"""Branches, replicas, backups and restores with real servers and a real client."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import trio

from corral.actors.databases import store
from corral.actors.databases.store import BackupRecord
from corral.storage import utc_now_iso
from tests.http.database_support import (
    API,
    credentials,
    db_api,
    owner,
    running_db,
    sql,
    wait_backup,
    wait_status,
)
from tests.support import Api, Tenant, assert_error

__all__ = ["db_api", "owner"]


async def wait_restore(api: Api, tenant: Tenant, database_id: str, restore_id: str, timeout: float = 60) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            response = await api.request("GET", f"{API}/databases/{database_id}/restores", key=tenant.key)
            assert response.status_code == 200, response.text
            found = [r for r in response.json()["data"] if r["id"] == restore_id]
            if found and found[0]["status"] != "running":
                return found[0]
            await trio.sleep(0.1)


async def test_a_branch_has_the_parents_data_and_is_independent(db_api: Api, owner: Tenant) -> None:
    parent = await running_db(db_api, owner, name="parent")
    pcreds = await credentials(db_api, owner, parent["id"])
    await sql(pcreds["url"], "CREATE TABLE t (v text)", "INSERT INTO t VALUES ('before')")
    response = await db_api.request("POST", f"{API}/databases/{parent['id']}/branch", key=owner.key, json={"name": "feature"})
    assert response.status_code == 202, response.text
    branch = response.json()["data"]
    assert branch["parent_id"] == parent["id"] and branch["role"] == "primary" and branch["status"] == "creating"
    await wait_status(db_api, owner, branch["id"])
    bcreds = await credentials(db_api, owner, branch["id"])
    assert bcreds["password"] != pcreds["password"] and bcreds["port"] != pcreds["port"]
    [rows] = await sql(bcreds["url"], "SELECT v FROM t")
    assert rows == [("before",)]
    await sql(bcreds["url"], "INSERT INTO t VALUES ('branch only')")
    await sql(pcreds["url"], "INSERT INTO t VALUES ('parent only')")
    [branch_rows] = await sql(bcreds["url"], "SELECT v FROM t ORDER BY v")
    [parent_rows] = await sql(pcreds["url"], "SELECT v FROM t ORDER BY v")
    assert branch_rows == [("before",), ("branch only",)]
    assert parent_rows == [("before",), ("parent only",)]
    # the parent's password does not open the branch
    with pytest.raises(psycopg.OperationalError):
        await sql(bcreds["url"].replace(bcreds["password"], pcreds["password"]), "SELECT 1")
    # errors
    taken = await db_api.request("POST", f"{API}/databases/{parent['id']}/branch", key=owner.key, json={"name": "feature"})
    assert_error(taken, 409, "DATABASE_NAME_TAKEN")
    missing = await db_api.request("POST", f"{API}/databases/{parent['id']}/branch", key=owner.key, json={})
    assert_error(missing, 400, "MISSING_PARAM")
    # a stopped database is branched from its files
    await db_api.request("POST", f"{API}/databases/{parent['id']}/stop", key=owner.key)
    cold = await db_api.request("POST", f"{API}/databases/{parent['id']}/branch", key=owner.key, json={"name": "cold"})
    assert cold.status_code == 202, cold.text
    await wait_status(db_api, owner, cold.json()["data"]["id"])
    ccreds = await credentials(db_api, owner, cold.json()["data"]["id"])
    [cold_rows] = await sql(ccreds["url"], "SELECT count(*) FROM t")
    assert cold_rows == [(2,)]


async def test_a_replica_streams_and_refuses_writes(db_api: Api, owner: Tenant) -> None:
    primary = await running_db(db_api, owner, name="primary")
    pcreds = await credentials(db_api, owner, primary["id"])
    await sql(pcreds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (1)")
    response = await db_api.request("POST", f"{API}/databases/{primary['id']}/replicas", key=owner.key, json={})
    assert response.status_code == 202, response.text
    replica = response.json()["data"]
    assert replica["role"] == "replica" and replica["primary_id"] == primary["id"]
    assert replica["name"] == "primary-replica-1"
    await wait_status(db_api, owner, replica["id"])
    rcreds = await credentials(db_api, owner, replica["id"])
    assert rcreds["user"] == pcreds["user"] and rcreds["port"] != pcreds["port"]
    [rows] = await sql(rcreds["url"], "SELECT v FROM t")
    assert rows == [(1,)]
    await sql(pcreds["url"], "INSERT INTO t VALUES (2)")
    started = time.monotonic()
    with trio.fail_after(5):
        while (await sql(rcreds["url"], "SELECT count(*) FROM t"))[0] != [(2,)]:
            await trio.sleep(0.02)
    assert time.monotonic() - started < 1.0  # caught up within a second under light load
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        await sql(rcreds["url"], "INSERT INTO t VALUES (3)")
    listed = await db_api.request("GET", f"{API}/databases/{primary['id']}/replicas", key=owner.key)
    assert [r["id"] for r in listed.json()["data"]] == [replica["id"]]
    nested = await db_api.request("POST", f"{API}/databases/{replica['id']}/replicas", key=owner.key, json={})
    assert_error(nested, 409, "INVALID_STATE")
    rotate = await db_api.request("POST", f"{API}/databases/{replica['id']}/credentials/rotate", key=owner.key)
    assert_error(rotate, 409, "INVALID_STATE")
    # a rotation of the primary reaches the replica (its roles are the primary's)
    rotated = (await db_api.request("POST", f"{API}/databases/{primary['id']}/credentials/rotate", key=owner.key)).json()["data"]
    await trio.sleep(0.5)
    fresh = await credentials(db_api, owner, replica["id"])
    assert fresh["password"] == rotated["password"]
    await sql(fresh["url"], "SELECT 1")
    named = await db_api.request("POST", f"{API}/databases/{primary['id']}/replicas", key=owner.key, json={"name": "reader"})
    assert named.status_code == 202 and named.json()["data"]["name"] == "reader"
    await wait_status(db_api, owner, named.json()["data"]["id"])


async def test_backup_change_restore(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="precious")
    did = database["id"]
    creds = await credentials(db_api, owner, did)
    await sql(creds["url"], "CREATE TABLE t (v text)", "INSERT INTO t VALUES ('good')")
    response = await db_api.request("POST", f"{API}/databases/{did}/backups", key=owner.key)
    assert response.status_code == 202, response.text
    backup = response.json()["data"]
    assert backup["status"] == "running" and backup["database_id"] == did and backup["method"] == "pg_basebackup"
    done = await wait_backup(db_api, owner, did, backup["id"])
    assert done["status"] == "completed" and done["size_bytes"] > 0 and done["completed_at"]
    listed = await db_api.request("GET", f"{API}/databases/{did}/backups", key=owner.key)
    assert [b["id"] for b in listed.json()["data"]] == [backup["id"]]
    # break the data, then restore
    await sql(creds["url"], "DELETE FROM t", "INSERT INTO t VALUES ('broken')")
    restore = await db_api.request("POST", f"{API}/databases/{did}/restore", key=owner.key, json={"backup_id": backup["id"]})
    assert restore.status_code == 202, restore.text
    body = restore.json()["data"]
    assert body["status"] == "running" and body["backup_id"] == backup["id"]
    finished = await wait_restore(db_api, owner, did, body["id"])
    assert finished["status"] == "completed", finished
    await wait_status(db_api, owner, did)
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [("good",)]
    # into another database of the tenant: its contents become the backup's, its credentials stay its own
    other = await running_db(db_api, owner, name="copy")
    ocreds = await credentials(db_api, owner, other["id"])
    into = await db_api.request("POST", f"{API}/databases/{other['id']}/restore", key=owner.key, json={"backup_id": backup["id"]})
    assert into.status_code == 202, into.text
    assert (await wait_restore(db_api, owner, other["id"], into.json()["data"]["id"]))["status"] == "completed"
    [copied] = await sql(ocreds["url"], "SELECT v FROM t")
    assert copied == [("good",)]
    # errors
    assert_error(await db_api.request("GET", f"{API}/databases/{did}/backups/{other['id']}", key=owner.key), 404, "BACKUP_NOT_FOUND")
    assert_error(await db_api.request("GET", f"{API}/databases/{did}/backups/nope", key=owner.key), 400, "INVALID_ID")
    unknown = await db_api.request("POST", f"{API}/databases/{did}/restore", key=owner.key, json={"backup_id": other["id"]})
    assert_error(unknown, 404, "BACKUP_NOT_FOUND")
    assert_error(await db_api.request("POST", f"{API}/databases/{did}/restore", key=owner.key, json={}), 400, "MISSING_PARAM")
    bad = await db_api.request("POST", f"{API}/databases/{did}/restore", key=owner.key, json={"backup_id": "x"})
    assert_error(bad, 422, "VALIDATION_ERROR")
    # another tenant cannot restore this tenant's backup
    stranger = await db_api.create_tenant("Stranger")
    theirs = await running_db(db_api, stranger, name="theirs")
    foreign = await db_api.request("POST", f"{API}/databases/{theirs['id']}/restore", key=stranger.key, json={"backup_id": backup["id"]})
    assert_error(foreign, 404, "BACKUP_NOT_FOUND")


async def test_a_failed_restore_leaves_the_database_as_it_was(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="safe")
    creds = await credentials(db_api, owner, database["id"])
    await sql(creds["url"], "CREATE TABLE t (v text)", "INSERT INTO t VALUES ('current')")
    platform = db_api.platform
    blob = await platform.blobs.put_bytes(b"this is not a base backup")
    broken = BackupRecord(
        id="0b0b0b0b-0000-4000-8000-000000000001", tenant_id=owner.id, database_id=database["id"], status="completed",
        method="pg_basebackup", size_bytes=blob.size_bytes, blob_sha256=blob.sha256, source_user="x", source_database="y",
        error=None, started_at=utc_now_iso(), completed_at=utc_now_iso(),
    )
    await platform.db.transaction(lambda tx: store.insert_backup(tx, broken))
    response = await db_api.request("POST", f"{API}/databases/{database['id']}/restore", key=owner.key, json={"backup_id": broken.id})
    assert response.status_code == 202, response.text
    finished = await wait_restore(db_api, owner, database["id"], response.json()["data"]["id"])
    assert finished["status"] == "failed" and finished["error"]
    record = await wait_status(db_api, owner, database["id"])
    assert record["status"] == "running"
    [rows] = await sql(creds["url"], "SELECT v FROM t")
    assert rows == [("current",)]


async def test_backups_and_replicas_survive_writes_and_checkpoints(db_api: Api, owner: Tenant) -> None:
    """What a user hit: rows loaded, then a backup, a branch and a replica asked at once
    (each forces a checkpoint that recycles WAL). The backup completes, the replica keeps
    streaming through its replication slot, and deleting it frees the slot."""
    primary = await running_db(db_api, owner, name="busy")
    pid = primary["id"]
    pcreds = await credentials(db_api, owner, pid)
    load = "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 100000) g"
    await sql(pcreds["url"], "CREATE TABLE t (v int, pad text)", load)
    replica_response = await db_api.request("POST", f"{API}/databases/{pid}/replicas", key=owner.key, json={})
    assert replica_response.status_code == 202, replica_response.text
    replica = replica_response.json()["data"]
    await wait_status(db_api, owner, replica["id"])
    slot = "replica_" + replica["id"].replace("-", "")
    [slots] = await sql(pcreds["url"], "SELECT slot_name, active FROM pg_replication_slots")
    assert (slot, True) in slots
    branches = []
    for round_ in range(3):  # WAL well past what a checkpoint keeps; each branch forces a checkpoint
        await sql(pcreds["url"], load)
        if round_ == 1:
            backup = (await db_api.request("POST", f"{API}/databases/{pid}/backups", key=owner.key)).json()["data"]
        branch = await db_api.request("POST", f"{API}/databases/{pid}/branch", key=owner.key, json={"name": f"busy-{round_}"})
        assert branch.status_code == 202, branch.text
        branches.append(branch.json()["data"]["id"])
    assert (await wait_backup(db_api, owner, pid, backup["id"], timeout=120))["status"] == "completed"
    for branch_id in branches:
        await wait_status(db_api, owner, branch_id, timeout=120)
    rcreds = await credentials(db_api, owner, replica["id"])
    with trio.fail_after(60):
        while (await sql(rcreds["url"], "SELECT count(*) FROM t"))[0] != [(400000,)]:
            await trio.sleep(0.2)
    deleted = await db_api.request("DELETE", f"{API}/databases/{replica['id']}", key=owner.key)
    assert deleted.status_code == 200, deleted.text
    [left] = await sql(pcreds["url"], "SELECT slot_name FROM pg_replication_slots")
    assert left == []
