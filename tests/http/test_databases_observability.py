"""A database's logs, log stream, metrics and lifecycle events."""

from __future__ import annotations

import pytest
import trio

from tests.http.database_support import API, credentials, db_api, owner, running_db, sql
from tests.sse_client import open_sse
from tests.support import Api, Tenant, assert_error

__all__ = ["db_api", "owner"]


async def test_logs_tail_and_limits(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="logged")
    did = database["id"]
    response = await db_api.request("GET", f"{API}/databases/{did}/logs", key=owner.key)
    assert response.status_code == 200, response.text
    lines = response.json()["data"]["lines"]
    assert any("ready to accept connections" in line["line"] for line in lines)
    assert all(line["ts"] is None or line["ts"].endswith("Z") for line in lines)
    one = await db_api.request("GET", f"{API}/databases/{did}/logs?tail=1", key=owner.key)
    assert len(one.json()["data"]["lines"]) == 1
    top = await db_api.request("GET", f"{API}/databases/{did}/logs?tail=5000", key=owner.key)
    assert top.status_code == 200
    none = await db_api.request("GET", f"{API}/databases/{did}/logs?tail=0", key=owner.key)
    assert none.json()["data"]["lines"] == []
    assert_error(await db_api.request("GET", f"{API}/databases/{did}/logs?tail=5001", key=owner.key), 400, "INVALID_PARAM")
    creds = await credentials(db_api, owner, did)
    text = "\n".join(line["line"] for line in top.json()["data"]["lines"])
    assert creds["password"] not in text


async def test_the_log_stream_sends_new_lines(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="streamed")
    did = database["id"]
    ticket = (await db_api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)).json()["ticket"]
    async with open_sse(db_api.client, f"{API}/databases/{did}/logs/stream?tail=0&ticket={ticket}") as stream:
        await stream.wait_connected()
        restarted = await db_api.request("POST", f"{API}/databases/{did}/restart", key=owner.key)
        assert restarted.status_code == 200
        with trio.fail_after(20):
            while True:
                frame = await stream.next_frame()
                if frame.event == "log" and "shutting down" in frame.data["line"]:
                    break
    missing = assert_error(await db_api.request("GET", f"{API}/databases/{did}/logs/stream"), 401, "UNAUTHORIZED")
    assert missing["message"] == "missing sse ticket"


async def test_metrics_from_the_server_and_its_cgroup(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="measured", auto_suspend_seconds=0)
    did = database["id"]
    creds = await credentials(db_api, owner, did)
    await sql(creds["url"], "CREATE TABLE t AS SELECT generate_series(1, 10000) AS v")
    await trio.sleep(11)  # two cgroup sample periods
    response = await db_api.request("GET", f"{API}/databases/{did}/metrics", key=owner.key)
    assert response.status_code == 200, response.text
    metrics = response.json()["data"]
    assert set(metrics) == {"connections", "size_bytes", "transactions_per_second", "cpu_percent", "memory_percent"}
    assert metrics["size_bytes"] > 1_000_000
    assert metrics["connections"] >= 0 and metrics["transactions_per_second"] >= 0
    if db_api.platform.databases.driver.cgroups is not None:
        assert metrics["memory_percent"] and {"ts", "value"} == set(metrics["memory_percent"][0])
        assert metrics["cpu_percent"]
    await db_api.request("POST", f"{API}/databases/{did}/stop", key=owner.key)
    stopped = (await db_api.request("GET", f"{API}/databases/{did}/metrics", key=owner.key)).json()["data"]
    assert stopped["connections"] == 0 and stopped["size_bytes"] > 1_000_000


async def test_lifecycle_events_are_on_the_bus(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="evented")
    did = database["id"]
    await db_api.request("POST", f"{API}/databases/{did}/stop", key=owner.key)
    await db_api.request("POST", f"{API}/databases/{did}/start", key=owner.key)
    await db_api.request("DELETE", f"{API}/databases/{did}", key=owner.key)
    events = await db_api.platform.events.list("database", did)
    types = [event.type for event in events]
    for expected in ("database.created", "database.ready", "database.started", "database.stopped", "database.deleted"):
        assert expected in types, types
    assert all(event.tenant_id == owner.id for event in events)
    assert types.index("database.created") < types.index("database.ready") < types.index("database.stopped")


@pytest.mark.parametrize("path", ["/logs", "/metrics", "/credentials"])
async def test_reads_of_a_deleted_database_are_404(db_api: Api, owner: Tenant, path: str) -> None:
    database = await running_db(db_api, owner, name="deleted")
    await db_api.request("DELETE", f"{API}/databases/{database['id']}", key=owner.key)
    assert_error(await db_api.request("GET", f"{API}/databases/{database['id']}{path}", key=owner.key), 404, "DATABASE_NOT_FOUND")


async def test_logs_default_to_the_last_200_lines(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="chatty")
    servers = db_api.platform.databases.driver
    for n in range(300):
        servers.note(database["id"], f"note {n}")
    lines = (await db_api.request("GET", f"{API}/databases/{database['id']}/logs", key=owner.key)).json()["data"]["lines"]
    assert len(lines) == 200 and lines[-1]["line"].endswith("note 299")
    every = (await db_api.request("GET", f"{API}/databases/{database['id']}/logs?tail=5000", key=owner.key)).json()["data"]["lines"]
    assert len(every) > 300


async def test_a_log_flooded_by_the_tenant_is_cut_to_its_last_lines(db_api: Api, owner: Tenant) -> None:
    """Every `RAISE WARNING` (and every failed statement) is written to the server's log,
    which is on the node's disk: 80 MB of them are cut back to the last 16 MiB within
    a round of the node's trimming (10 s), the log says so, and the server goes on."""
    database = await running_db(db_api, owner, name="flooded")
    did = database["id"]
    creds = await credentials(db_api, owner, did)
    await sql(creds["url"], "DO $$ BEGIN FOR i IN 1..40 LOOP RAISE WARNING 'flood %', repeat('w', 2000000); END LOOP; END $$")
    path = db_api.platform.databases.driver.log_path(did)
    with trio.fail_after(40):
        while path.stat().st_size > 64 << 20 or "bytes were removed" not in path.read_text(errors="replace")[:300]:
            await trio.sleep(0.5)
    assert path.stat().st_size < (16 << 20) + (4 << 20)
    assert path.read_text(errors="replace").startswith(tuple(f"{n}" for n in range(10)))  # a timestamp: the note
    assert "[corral] LOG:  the log passed 67108864 bytes" in path.read_text(errors="replace").split("\n", 1)[0]
    lines = (await db_api.request("GET", f"{API}/databases/{did}/logs?tail=5", key=owner.key)).json()["data"]["lines"]
    assert any("flood" in line["line"] for line in lines)
    assert await sql(creds["url"], "SELECT 1") == [[(1,)]]
