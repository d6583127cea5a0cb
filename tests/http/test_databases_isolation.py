"""Who reaches a database: the tenant's sandboxes through `internal_url`, the host
through `url`; another tenant's instances get no connection at all (nftables)."""

from __future__ import annotations

import shlex
from typing import Any

from tests.http.database_support import (
    API,
    credentials,
    db_api,
    owner,
    running_db,
    sql,
    wait_status,
)
from tests.http.pg_wire_client import SOURCE
from tests.support import Api, Tenant

__all__ = ["db_api", "owner"]


async def sandbox(api: Api, tenant: Tenant) -> str:
    response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"name": "client"})
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["data"]["id"]
    script = f"cat > /tmp/pgc.py <<'PYEOF'\n{SOURCE}\nPYEOF"
    result = await run(api, tenant, sandbox_id, script)
    assert result["exit_code"] == 0, result
    return sandbox_id


async def run(api: Api, tenant: Tenant, sandbox_id: str, command: str) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/exec", key=tenant.key, json={"command": command, "timeout": 60})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def query_from(api: Api, tenant: Tenant, sandbox_id: str, url: str, query: str) -> dict[str, Any]:
    return await run(api, tenant, sandbox_id, f"python3 /tmp/pgc.py {shlex.quote(url)} {shlex.quote(query)}")


async def test_the_tenants_sandbox_connects_and_another_tenants_cannot(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="shared", auto_suspend_seconds=0)
    creds = await credentials(db_api, owner, database["id"])
    await sql(creds["url"], "CREATE TABLE t (v int)", "INSERT INTO t VALUES (42)")
    mine = await sandbox(db_api, owner)
    result = await query_from(db_api, owner, mine, creds["internal_url"], "SELECT v FROM t")
    assert result["exit_code"] == 0 and result["stdout"].strip() == "42", result
    wrong = creds["internal_url"].replace(creds["password"], "nope")
    refused = await query_from(db_api, owner, mine, wrong, "SELECT 1")
    assert refused["exit_code"] == 2 and "password authentication failed" in refused["stdout"], refused
    other = await db_api.create_tenant("Other")
    theirs = await sandbox(db_api, other)
    blocked = await query_from(db_api, other, theirs, creds["internal_url"], "SELECT v FROM t")
    assert blocked["exit_code"] == 3, blocked  # no connection at all: the SYN is dropped
    # the pair set holds the owner's instance with the port, not the other's
    pairs = db_api.platform.databases.access.applied or frozenset()
    ports = {port for _, port in pairs}
    assert creds["port"] in ports
    # a database of the other tenant is theirs to reach, not ours
    their_db = await running_db(db_api, other, name="theirs", auto_suspend_seconds=0)
    their_creds = await credentials(db_api, other, their_db["id"])
    ok = await query_from(db_api, other, theirs, their_creds["internal_url"], "SELECT 1")
    assert ok["stdout"].strip() == "1", ok
    no = await query_from(db_api, owner, mine, their_creds["internal_url"], "SELECT 1")
    assert no["exit_code"] == 3, no


async def test_a_sandbox_wakes_a_suspended_database(db_api: Api, owner: Tenant) -> None:
    database = await running_db(db_api, owner, name="napping", auto_suspend_seconds=1)
    creds = await credentials(db_api, owner, database["id"])
    mine = await sandbox(db_api, owner)
    await wait_status(db_api, owner, database["id"], "suspended", timeout=30)
    result = await query_from(db_api, owner, mine, creds["internal_url"], "SELECT 40 + 2")
    assert result["stdout"].strip() == "42", result
