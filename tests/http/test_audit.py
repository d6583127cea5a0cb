"""The audit log: a row for every authenticated mutation, its filters and pages, and no secrets."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support import (
    ADMIN_KEY,
    API,
    PASSWORD,
    Api,
    Tenant,
    assert_error,
    create_key,
    member_key,
)

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def audit_log(
    api: Api, key: str, query: str = "", *, operator: bool = False
) -> list[dict[str, Any]]:
    """The tenant's audit rows; without `operator`, those of the operator's set-up calls are left out."""
    response = await api.request("GET", f"{API}/audit-log{query}", key=key)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]
    return [row for row in rows if operator or row["actor"]["type"] != "operator"]


async def entry_for(api: Api, tenant: Tenant, response: httpx.Response) -> dict[str, Any]:
    """The audit row written for `response`, found by its request id."""
    rows = [
        row
        for row in await audit_log(api, tenant.key, operator=True)
        if row["request_id"] == response.headers["X-Request-Id"]
    ]
    assert len(rows) == 1, rows
    return rows[0]


# --- what is recorded ------------------------------------------------------------------


async def test_workspace_create_is_recorded(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "POST", f"{API}/workspaces", key=tenant.key, json={"name": "Audited"}
    )
    assert response.status_code == 201
    workspace_id = response.json()["data"]["id"]
    entry = await entry_for(api, tenant, response)
    assert entry["action"] == "workspaces.create"
    assert entry["outcome"] == "success"
    assert entry["status_code"] == 201
    assert entry["api_key_id"] == tenant.key_id
    assert entry["actor"] == {"type": "user_key", "user_id": tenant.owner_id}
    assert entry["workspace_id"] == workspace_id
    assert entry["resource_type"] == "workspace" and entry["resource_id"] == workspace_id
    assert entry["tenant_id"] == tenant.id
    assert entry["method"] == "POST" and entry["path"] == f"{API}/workspaces"
    assert entry["timestamp"] and entry["id"]
    assert {
        "project_id",
        "external_workspace_id",
        "external_user_id",
        "external_project_id",
    } <= set(entry)


async def test_key_lifecycle_is_recorded(api: Api, tenant: Tenant) -> None:
    created = await api.request("POST", f"{API}/api-keys", key=tenant.key, json={"name": "audited"})
    key_id = created.json()["data"]["id"]
    revoked = await api.request("DELETE", f"{API}/api-keys/{key_id}", key=tenant.key)
    create_entry = await entry_for(api, tenant, created)
    revoke_entry = await entry_for(api, tenant, revoked)
    assert (create_entry["action"], create_entry["outcome"], create_entry["resource_id"]) == (
        "api_keys.create",
        "success",
        key_id,
    )
    assert (revoke_entry["action"], revoke_entry["outcome"], revoke_entry["resource_id"]) == (
        "api_keys.revoke",
        "success",
        key_id,
    )
    assert create_entry["api_key_id"] == revoke_entry["api_key_id"] == tenant.key_id


async def test_every_workspace_and_project_mutation_is_recorded(api: Api, tenant: Tenant) -> None:
    workspace = (
        await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "W"})
    ).json()["data"]
    project = (
        await api.request(
            "POST",
            f"{API}/projects",
            key=tenant.key,
            json={"name": "P", "workspace_id": workspace["id"]},
        )
    ).json()["data"]
    await api.request(
        "PATCH", f"{API}/projects/{project['id']}", key=tenant.key, json={"name": "P2"}
    )
    await api.request("DELETE", f"{API}/projects/{project['id']}", key=tenant.key)
    await api.request(
        "PATCH", f"{API}/workspaces/{workspace['id']}", key=tenant.key, json={"name": "W2"}
    )
    await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=tenant.key)
    rows = await audit_log(api, tenant.key)
    by_action = {row["action"]: row for row in rows}
    assert set(by_action) == {
        "workspaces.create",
        "projects.create",
        "projects.update",
        "projects.delete",
        "workspaces.update",
        "workspaces.delete",
    }
    assert all(
        row["outcome"] == "success" and row["workspace_id"] == workspace["id"] for row in rows
    )
    for action in ("projects.create", "projects.update", "projects.delete"):
        assert by_action[action]["project_id"] == project["id"]


async def test_reads_are_not_recorded(api: Api, tenant: Tenant) -> None:
    for path in ("/tenant", "/workspaces", "/projects", "/api-keys", "/audit-log"):
        assert (await api.request("GET", f"{API}{path}", key=tenant.key)).status_code == 200
    assert await audit_log(api, tenant.key) == []


async def test_failures_are_recorded_with_their_status(api: Api, tenant: Tenant) -> None:
    _, member = await member_key(api, tenant)
    denied = await api.request(
        "PATCH", f"{API}/workspaces/{tenant.workspace_id}", key=member, json={"name": "x"}
    )
    invalid = await api.request("POST", f"{API}/workspaces", key=tenant.key, json={})
    conflict = await api.request(
        "DELETE", f"{API}/workspaces/{tenant.workspace_id}", key=tenant.key
    )
    missing = await api.request("DELETE", f"{API}/api-keys/{UNKNOWN_ID}", key=tenant.key)
    cases = (
        (denied, 403, "workspaces.update"),
        (invalid, 422, "workspaces.create"),
        (conflict, 409, "workspaces.delete"),
        (missing, 404, "api_keys.revoke"),
    )
    for response, status, action in cases:
        assert response.status_code == status
        entry = await entry_for(api, tenant, response)
        assert (entry["outcome"], entry["status_code"], entry["action"]) == (
            "failure",
            status,
            action,
        )
    denied_entry = await entry_for(api, tenant, denied)
    assert denied_entry["workspace_id"] == tenant.workspace_id
    assert denied_entry["api_key_id"] != tenant.key_id


async def test_scope_refusals_are_recorded(api: Api, tenant: Tenant) -> None:
    reader = await create_key(api, tenant.key, scopes=["org:read"])
    response = await api.request(
        "POST", f"{API}/workspaces", key=reader["key"], json={"name": "no"}
    )
    assert response.status_code == 403
    entry = await entry_for(api, tenant, response)
    assert (entry["outcome"], entry["status_code"], entry["api_key_id"]) == (
        "failure",
        403,
        reader["id"],
    )


async def test_unauthenticated_mutations_leave_no_row(api: Api, tenant: Tenant) -> None:
    await api.request("POST", f"{API}/workspaces", json={"name": "anon"})
    await api.request("POST", f"{API}/workspaces", key="msk_u_forged", json={"name": "anon"})
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    assert (
        await api.platform.db.fetch_value(
            "SELECT COUNT(*) FROM audit_events WHERE action != 'tenants.create'"
        )
        == 0
    )


async def test_session_and_operator_mutations_are_recorded(api: Api, tenant: Tenant) -> None:
    token = (await api.login(tenant.owner_email))["token"]
    via_session = await api.request("POST", f"{API}/workspaces", key=token, json={"name": "S"})
    entry = await entry_for(api, tenant, via_session)
    assert entry["api_key_id"] is None
    assert entry["actor"] == {"type": "session", "user_id": tenant.owner_id}

    via_operator = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "name": "ops", "key_type": "platform"},
    )
    entry = await entry_for(api, tenant, via_operator)
    assert entry["action"] == "api_keys.create"
    assert entry["actor"]["type"] == "operator"
    assert entry["resource_id"] == via_operator.json()["data"]["id"]


async def test_restricted_key_actions_carry_the_workspace(api: Api, tenant: Tenant) -> None:
    workspace = (
        await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Only"})
    ).json()["data"]
    restricted = await create_key(api, tenant.key, key_type="platform", workspace_id=workspace["id"])
    create_entry = [
        row for row in await audit_log(api, tenant.key) if row["resource_id"] == restricted["id"]
    ]
    assert create_entry[0]["workspace_id"] == workspace["id"]
    response = await api.request(
        "POST",
        f"{API}/projects",
        key=restricted["key"],
        json={"name": "P", "workspace_id": workspace["id"]},
    )
    entry = await entry_for(api, tenant, response)
    assert (entry["api_key_id"], entry["workspace_id"]) == (restricted["id"], workspace["id"])
    assert entry["actor"]["type"] == "platform_key"


# --- filters and pages -----------------------------------------------------------------


async def test_filter_by_api_key_and_workspace(api: Api, tenant: Tenant) -> None:
    second = await create_key(api, tenant.key, name="second")
    workspace = (
        await api.request(
            "POST", f"{API}/workspaces", key=second["key"], json={"name": "By second"}
        )
    ).json()["data"]
    await api.request(
        "POST", f"{API}/projects", key=second["key"], json={"name": "P"}
    )  # default workspace
    await api.request(
        "PATCH", f"{API}/workspaces/{workspace['id']}", key=tenant.key, json={"name": "By owner"}
    )

    by_second = await audit_log(api, tenant.key, f"?api_key_id={second['id']}")
    assert {row["action"] for row in by_second} == {"workspaces.create", "projects.create"}
    assert all(row["api_key_id"] == second["id"] for row in by_second)

    by_owner = await audit_log(api, tenant.key, f"?api_key_id={tenant.key_id}")
    assert {row["action"] for row in by_owner} == {"api_keys.create", "workspaces.update"}

    in_workspace = await audit_log(api, tenant.key, f"?workspace_id={workspace['id']}")
    assert {row["action"] for row in in_workspace} == {"workspaces.create", "workspaces.update"}
    in_default = await audit_log(api, tenant.key, f"?workspace_id={tenant.workspace_id}")
    assert {row["action"] for row in in_default} == {"projects.create"}

    both = await audit_log(
        api, tenant.key, f"?workspace_id={workspace['id']}&api_key_id={tenant.key_id}"
    )
    assert [row["action"] for row in both] == ["workspaces.update"]
    assert await audit_log(api, tenant.key, f"?api_key_id={UNKNOWN_ID}") == []

    assert_error(
        await api.request("GET", f"{API}/audit-log?api_key_id=nope", key=tenant.key),
        400,
        "INVALID_ID",
    )
    assert_error(
        await api.request("GET", f"{API}/audit-log?workspace_id=nope", key=tenant.key),
        400,
        "INVALID_ID",
    )


async def test_pagination_with_limit_and_next_cursor(api: Api, tenant: Tenant) -> None:
    for n in range(5):
        await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": f"W{n}"})
    everything = await api.request("GET", f"{API}/audit-log", key=tenant.key)
    assert everything.json()["next_cursor"] is None
    all_ids = [row["id"] for row in everything.json()["data"]]
    assert len(all_ids) == 6  # with the operator's tenants.create

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        response = await api.request("GET", f"{API}/audit-log{query}", key=tenant.key)
        assert response.status_code == 200
        page = response.json()
        assert len(page["data"]) <= 2
        seen += [row["id"] for row in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == all_ids  # same order, no gaps, no repeats

    exact = await api.request("GET", f"{API}/audit-log?limit=6", key=tenant.key)
    assert len(exact.json()["data"]) == 6 and exact.json()["next_cursor"] is None


async def test_newest_first(api: Api, tenant: Tenant) -> None:
    names = [f"W{n}" for n in range(4)]
    for name in names:
        await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": name})
    rows = await audit_log(api, tenant.key)
    timestamps = [row["timestamp"] for row in rows]
    assert timestamps == sorted(timestamps, reverse=True)


async def test_limit_bounds(api: Api, tenant: Tenant) -> None:
    for bad in ("0", "-1", "abc", "1001"):
        assert_error(
            await api.request("GET", f"{API}/audit-log?limit={bad}", key=tenant.key),
            400,
            "INVALID_PARAM",
        )
    assert (
        await api.request("GET", f"{API}/audit-log?limit=1000", key=tenant.key)
    ).status_code == 200


# --- who may read it -------------------------------------------------------------------


async def test_members_cannot_read_the_audit_log(api: Api, tenant: Tenant) -> None:
    _, member = await member_key(api, tenant, "member")
    assert_error(await api.request("GET", f"{API}/audit-log", key=member), 403, "FORBIDDEN")
    _, admin = await member_key(api, tenant, "admin")
    assert (await api.request("GET", f"{API}/audit-log", key=admin)).status_code == 200
    no_scope = await create_key(api, tenant.key, scopes=["org:read"])
    assert_error(
        await api.request("GET", f"{API}/audit-log", key=no_scope["key"]), 403, "insufficient_scope"
    )
    assert_error(await api.request("GET", f"{API}/audit-log"), 401, "invalid_token")


async def test_audit_log_is_per_tenant(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Mine"})
    await api.request("POST", f"{API}/workspaces", key=other_tenant.key, json={"name": "Theirs"})
    mine = await audit_log(api, tenant.key)
    theirs = await audit_log(api, other_tenant.key)
    assert {row["tenant_id"] for row in mine} == {tenant.id}
    assert {row["tenant_id"] for row in theirs} == {other_tenant.id}
    assert await audit_log(api, tenant.key, f"?api_key_id={other_tenant.key_id}") == []
    assert await audit_log(api, tenant.key, f"?workspace_id={other_tenant.workspace_id}") == []


# --- secrets ---------------------------------------------------------------------------


async def test_secrets_never_appear_after_creation(api: Api) -> None:
    created = await api.admin(
        "POST",
        f"{API}/admin/tenants",
        json={"name": "Secretive", "owner_email": "s@acme.test", "owner_password": PASSWORD},
    )
    owner_key = created.json()["data"]["api_key"]["key"]
    tenant_id = created.json()["data"]["tenant"]["id"]
    user_password = "another secret password"
    await api.admin(
        "POST",
        f"{API}/admin/users",
        json={
            "email": "u@acme.test",
            "password": user_password,
            "tenant_id": tenant_id,
            "role": "admin",
        },
    )
    session = (
        await api.client.post(
            f"{API}/auth/login", json={"email": "u@acme.test", "password": user_password}
        )
    ).json()
    key_data = (
        await api.request("POST", f"{API}/api-keys", key=owner_key, json={"name": "later"})
    ).json()["data"]
    platform_key = (
        await api.request(
            "POST",
            f"{API}/api-keys",
            key=session["token"],
            json={"name": "p", "key_type": "platform"},
        )
    ).json()["data"]
    admin_key = (
        await api.admin(
            "POST",
            f"{API}/admin/api-keys",
            json={"tenant_id": tenant_id, "name": "a", "key_type": "admin"},
        )
    ).json()["data"]
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=owner_key)).json()["ticket"]
    await api.request("DELETE", f"{API}/api-keys/{key_data['id']}", key=owner_key)
    failed = await api.client.post(
        f"{API}/auth/login", json={"email": "s@acme.test", "password": "wrong but secret"}
    )
    assert failed.status_code == 401

    secrets = [
        PASSWORD,
        user_password,
        "wrong but secret",
        owner_key,
        key_data["key"],
        platform_key["key"],
        admin_key["key"],
        ticket,
        ADMIN_KEY,
    ]
    secrets += [
        s.split("_", 2)[-1]
        for s in (owner_key, key_data["key"], platform_key["key"], admin_key["key"])
    ]

    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    rows = await api.platform.db.fetch_all("SELECT * FROM audit_events")
    assert {row["action"] for row in rows} >= {
        "tenants.create",
        "users.create",
        "api_keys.create",
        "api_keys.revoke",
    }
    later_responses = [
        await api.request("GET", f"{API}/audit-log?limit=1000", key=owner_key),
        await api.request("GET", f"{API}/api-keys", key=owner_key),
        await api.request("GET", f"{API}/api-keys", key=session["token"]),
        await api.request("GET", f"{API}/tenant", key=owner_key),
        await api.admin("GET", f"{API}/admin/tenants"),
        await api.admin("GET", f"{API}/admin/outbox"),
        failed,
    ]
    texts = [json.dumps(rows), *(response.text for response in later_responses)]
    tables = await api.platform.db.fetch_all("SELECT name FROM sqlite_master WHERE type = 'table'")
    for table in tables:
        texts.append(json.dumps(await api.platform.db.fetch_all(f"SELECT * FROM {table['name']}")))
    for text in texts:
        for secret in secrets:
            assert secret not in text


async def test_restricted_key_reads_only_its_workspace_rows(api: Api, tenant: Tenant) -> None:
    workspace = (await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Only"})).json()["data"]
    restricted = await create_key(api, tenant.key, key_type="platform", workspace_id=workspace["id"])
    await api.request("POST", f"{API}/projects", key=tenant.key, json={"name": "In default"})
    await api.request("POST", f"{API}/projects", key=restricted["key"], json={"name": "Inside"})
    rows = await audit_log(api, restricted["key"])
    assert rows and {row["workspace_id"] for row in rows} == {workspace["id"]}
    assert_error(
        await api.request("GET", f"{API}/audit-log?workspace_id={tenant.workspace_id}", key=restricted["key"]),
        404,
        "NOT_FOUND",
    )


async def test_filters_accept_upper_case_ids(api: Api, tenant: Tenant) -> None:
    await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "W"})
    rows = await audit_log(api, tenant.key, f"?api_key_id={tenant.key_id.upper()}")
    assert [row["action"] for row in rows] == ["workspaces.create"]
