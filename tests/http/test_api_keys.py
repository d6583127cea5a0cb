"""Self-service API keys: creation, storage, listing, revocation, types, scopes, source addresses."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx

from corral.actors.tenancy import PRODUCT_SCOPES
from corral.ids import is_uuid
from tests.support import ADMIN_KEY, API, Api, Tenant, assert_error, create_key, member_key

# --- creation and storage --------------------------------------------------------------


async def test_create_user_key_returns_plaintext_once(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key, name="ci", key_type="user")
    assert data["key"].startswith("msk_u_")
    assert len(data["key"]) > 30
    assert is_uuid(data["id"])
    assert data["key_prefix"] == data["key"][: len(data["key_prefix"])]
    assert len(data["key_prefix"]) < len(data["key"]) - 16
    assert data["name"] == "ci"
    assert data["key_type"] == "user"
    assert data["key_purpose"] == "api"
    assert data["status"] == "active"
    assert data["rate_limit_rpm"] == 600
    assert data["created_at"]
    assert data["tenant_id"] == tenant.id
    assert data["user_id"] == tenant.owner_id
    assert set(data["scopes"]) == set(PRODUCT_SCOPES)

    works = await api.request("GET", f"{API}/tenant", key=data["key"])
    assert works.status_code == 200
    assert works.json()["data"]["id"] == tenant.id

    # The plaintext never appears again.
    shown = await api.request("GET", f"{API}/api-keys", key=data["key"])
    assert data["key"] not in shown.text
    assert data["key"][len(data["key_prefix"]) :] not in shown.text


async def test_key_type_defaults_to_user(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key)
    assert data["key_type"] == "user" and data["key"].startswith("msk_u_")


async def test_only_the_sha256_digest_is_stored(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key, name="stored")
    row = await api.platform.db.fetch_one("SELECT * FROM api_keys WHERE id = ?", (data["id"],))
    assert row is not None
    assert row["key_digest"] == hashlib.sha256(data["key"].encode()).hexdigest()
    secret_part = data["key"][len(data["key_prefix"]) :]
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    for table in ("api_keys", "audit_events", "events", "platform_settings"):
        dump = json.dumps(await api.platform.db.fetch_all(f"SELECT * FROM {table}"))
        assert data["key"] not in dump, table
        assert secret_part not in dump, table
    # The owner key from tenant creation is stored the same way.
    owner = await api.platform.db.fetch_one(
        "SELECT key_digest FROM api_keys WHERE id = ?", (tenant.key_id,)
    )
    assert (
        owner is not None and owner["key_digest"] == hashlib.sha256(tenant.key.encode()).hexdigest()
    )


async def test_platform_key(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key, name="automation", key_type="platform")
    assert data["key"].startswith("msk_p_")
    assert data["key_type"] == "platform"
    assert data["rate_limit_rpm"] == 30_000
    response = await api.request("GET", f"{API}/workspaces", key=data["key"])
    assert response.status_code == 200
    assert [w["id"] for w in response.json()["data"]] == [tenant.workspace_id]


async def test_keys_are_unique(api: Api, tenant: Tenant) -> None:
    keys = [await create_key(api, tenant.key, name=f"k{n}") for n in range(3)]
    assert len({k["key"] for k in keys}) == 3
    assert len({k["id"] for k in keys}) == 3


async def test_session_can_create_keys(api: Api, tenant: Tenant) -> None:
    token = (await api.login(tenant.owner_email))["token"]
    data = await create_key(api, token, name="from login")
    assert set(data["scopes"]) == set(PRODUCT_SCOPES)
    assert data["user_id"] == tenant.owner_id


async def test_create_validation(api: Api, tenant: Tenant) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "x", "key_type": "robot"}, "key_type"),
        ({"name": "x", "rate_limit_rpm": "fast"}, "rate_limit_rpm"),
        ({"name": "x", "scopes": "org:read"}, "scopes"),
        ({"name": "x", "scopes": [1, 2]}, "scopes"),
        ({"name": "x", "scopes": ["org:read", "root:everything"]}, "scopes"),
        ({"name": "x", "key_type": "user", "workspace_id": tenant.workspace_id}, "workspace_id"),
        (
            {
                "name": "x",
                "key_type": "platform",
                "workspace_id": "00000000-0000-4000-8000-000000000000",
            },
            "workspace_id",
        ),
    ]
    for body, field in cases:
        response = await api.request("POST", f"{API}/api-keys", key=tenant.key, json=body)
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert field in error["details"], (body, error)
    # Nothing was created along the way.
    assert await api.platform.db.fetch_value("SELECT COUNT(*) FROM api_keys") == 1


async def test_unknown_scope_named_in_details(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "POST",
        f"{API}/api-keys",
        key=tenant.key,
        json={"name": "x", "scopes": ["sandboxes:read", "bogus:scope"]},
    )
    error = assert_error(response, 422, "VALIDATION_ERROR")
    assert "bogus:scope" in error["details"]["scopes"]


async def test_admin_keys_are_not_creatable_publicly(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "POST", f"{API}/api-keys", key=tenant.key, json={"name": "root", "key_type": "admin"}
    )
    assert_error(response, 403, "FORBIDDEN")
    token = (await api.login(tenant.owner_email))["token"]
    assert_error(
        await api.request(
            "POST", f"{API}/api-keys", key=token, json={"name": "root", "key_type": "admin"}
        ),
        403,
        "FORBIDDEN",
    )
    assert (
        await api.platform.db.fetch_value("SELECT COUNT(*) FROM api_keys WHERE key_type = 'admin'")
        == 0
    )


async def test_platform_keys_only_for_owners_and_admins(api: Api, tenant: Tenant) -> None:
    _, member = await member_key(api, tenant, "member")
    assert_error(
        await api.request(
            "POST", f"{API}/api-keys", key=member, json={"name": "p", "key_type": "platform"}
        ),
        403,
        "FORBIDDEN",
    )
    # A member may still create user keys for themselves.
    assert (await create_key(api, member, key_type="user"))["key"].startswith("msk_u_")

    _, admin = await member_key(api, tenant, "admin")
    assert (await create_key(api, admin, key_type="platform"))["key"].startswith("msk_p_")
    assert (await create_key(api, tenant.key, key_type="platform"))["key"].startswith("msk_p_")


async def test_bootstrap_operator_key_cannot_create_tenant_keys(api: Api) -> None:
    response = await api.request("POST", f"{API}/api-keys", key=ADMIN_KEY, json={"name": "x"})
    assert_error(response, 422, "TENANT_RESOLUTION_FAILED")


# --- scopes ----------------------------------------------------------------------------


async def test_scopes_are_enforced(api: Api, tenant: Tenant) -> None:
    keys_only = (await create_key(api, tenant.key, scopes=["keys:read"]))["key"]
    error = assert_error(
        await api.request("GET", f"{API}/workspaces", key=keys_only), 403, "insufficient_scope"
    )
    assert "org:read" in error["message"]
    assert_error(
        await api.request("GET", f"{API}/tenant", key=keys_only), 403, "insufficient_scope"
    )
    assert (await api.request("GET", f"{API}/api-keys", key=keys_only)).status_code == 200
    assert_error(
        await api.request("POST", f"{API}/api-keys", key=keys_only, json={"name": "x"}),
        403,
        "insufficient_scope",
    )

    read_only = (await create_key(api, tenant.key, scopes=["org:read"]))["key"]
    assert (await api.request("GET", f"{API}/workspaces", key=read_only)).status_code == 200
    assert_error(
        await api.request("POST", f"{API}/workspaces", key=read_only, json={"name": "w"}),
        403,
        "insufficient_scope",
    )
    assert_error(
        await api.request(
            "PATCH", f"{API}/workspaces/{tenant.workspace_id}", key=read_only, json={"name": "w"}
        ),
        403,
        "insufficient_scope",
    )

    no_scopes = (await create_key(api, tenant.key, scopes=[]))["key"]
    assert_error(
        await api.request("GET", f"{API}/workspaces", key=no_scopes), 403, "insufficient_scope"
    )


async def test_write_implies_read(api: Api, tenant: Tenant) -> None:
    writer = (await create_key(api, tenant.key, scopes=["org:write"]))["key"]
    assert (await api.request("GET", f"{API}/workspaces", key=writer)).status_code == 200
    assert (await api.request("GET", f"{API}/tenant", key=writer)).status_code == 200
    assert (
        await api.request("POST", f"{API}/workspaces", key=writer, json={"name": "w"})
    ).status_code == 201
    keys_writer = (await create_key(api, tenant.key, scopes=["keys:write"]))["key"]
    assert (await api.request("GET", f"{API}/api-keys", key=keys_writer)).status_code == 200
    # Read does not imply write, and one area's write does not reach another area.
    assert_error(
        await api.request("GET", f"{API}/workspaces", key=keys_writer), 403, "insufficient_scope"
    )


async def test_key_cannot_grant_scopes_its_creator_lacks(api: Api, tenant: Tenant) -> None:
    limited = (await create_key(api, tenant.key, scopes=["keys:write", "org:read"]))["key"]
    response = await api.request(
        "POST",
        f"{API}/api-keys",
        key=limited,
        json={"name": "x", "scopes": ["org:read", "sandboxes:write"]},
    )
    error = assert_error(response, 403, "insufficient_scope")
    assert "sandboxes:write" in error["message"]
    # org:write is not granted by holding org:read.
    assert_error(
        await api.request(
            "POST", f"{API}/api-keys", key=limited, json={"name": "x", "scopes": ["org:write"]}
        ),
        403,
        "insufficient_scope",
    )
    # Without a list the new key inherits exactly the creator's scopes.
    inherited = await create_key(api, limited, name="inherited")
    assert set(inherited["scopes"]) == {"keys:write", "org:read"}
    subset = await create_key(api, limited, name="subset", scopes=["org:read"])
    assert subset["scopes"] == ["org:read"]


async def test_scopes_are_deduplicated(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key, scopes=["org:read", "org:read", "keys:read"])
    assert data["scopes"] == ["org:read", "keys:read"]


# --- listing ---------------------------------------------------------------------------


async def test_list_shows_the_callers_keys_without_plaintext(api: Api, tenant: Tenant) -> None:
    made = [
        await create_key(api, tenant.key, name=f"k{n}", key_type=kind)
        for n, kind in enumerate(("user", "platform"))
    ]
    _, member = await member_key(api, tenant)
    member_own = await create_key(api, member, name="member's")

    response = await api.request("GET", f"{API}/api-keys", key=tenant.key)
    assert response.status_code == 200
    listed = response.json()["data"]
    ids = {k["id"] for k in listed}
    assert ids == {tenant.key_id, *(k["id"] for k in made)}
    for entry in listed:
        assert "key" not in entry
        assert entry["key_prefix"] and entry["status"] == "active"
        assert {"id", "name", "key_type", "scopes", "rate_limit_rpm", "created_at"} <= set(entry)
    for key in (tenant.key, *(k["key"] for k in made), member, member_own["key"]):
        assert key not in response.text

    member_list = (await api.request("GET", f"{API}/api-keys", key=member)).json()["data"]
    assert member_own["id"] in {k["id"] for k in member_list}
    assert tenant.key_id not in {k["id"] for k in member_list}


async def test_list_is_per_tenant(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    listed = (await api.request("GET", f"{API}/api-keys", key=other_tenant.key)).json()["data"]
    assert [k["id"] for k in listed] == [other_tenant.key_id]


# --- revocation ------------------------------------------------------------------------


async def test_revoke_takes_effect_on_the_next_request(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key, name="doomed")
    assert (await api.request("GET", f"{API}/tenant", key=data["key"])).status_code == 200
    response = await api.request("DELETE", f"{API}/api-keys/{data['id']}", key=tenant.key)
    assert response.status_code == 200, response.text
    revoked = response.json()["data"]
    assert revoked["id"] == data["id"]
    assert revoked["status"] == "revoked"
    assert revoked["revoked_at"]
    assert "key" not in revoked
    assert_error(await api.request("GET", f"{API}/tenant", key=data["key"]), 401, "invalid_token")
    assert_error(
        await api.request("POST", f"{API}/workspaces", key=data["key"], json={"name": "x"}),
        401,
        "invalid_token",
    )

    listed = (await api.request("GET", f"{API}/api-keys", key=tenant.key)).json()["data"]
    assert next(k for k in listed if k["id"] == data["id"])["status"] == "revoked"
    row = await api.platform.db.fetch_one("SELECT status FROM api_keys WHERE id = ?", (data["id"],))
    assert row is not None and row["status"] == "revoked"


async def test_revocation_is_irreversible_and_idempotent(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key)
    first = await api.request("DELETE", f"{API}/api-keys/{data['id']}", key=tenant.key)
    second = await api.request("DELETE", f"{API}/api-keys/{data['id']}", key=tenant.key)
    assert first.status_code == 200
    assert second.status_code == 200
    assert second.json()["data"]["status"] == "revoked"
    assert second.json()["data"]["revoked_at"] == first.json()["data"]["revoked_at"]
    assert_error(await api.request("GET", f"{API}/tenant", key=data["key"]), 401, "invalid_token")


async def test_a_key_can_revoke_itself(api: Api, tenant: Tenant) -> None:
    data = await create_key(api, tenant.key)
    response = await api.request("DELETE", f"{API}/api-keys/{data['id']}", key=data["key"])
    assert response.status_code == 200
    assert_error(await api.request("GET", f"{API}/api-keys", key=data["key"]), 401, "invalid_token")


async def test_revoked_session_keys_do_not_affect_others(api: Api, tenant: Tenant) -> None:
    doomed = await create_key(api, tenant.key)
    kept = await create_key(api, tenant.key)
    await api.request("DELETE", f"{API}/api-keys/{doomed['id']}", key=tenant.key)
    assert (await api.request("GET", f"{API}/tenant", key=kept["key"])).status_code == 200
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200


async def test_revoke_other_peoples_keys(api: Api, tenant: Tenant) -> None:
    _, member = await member_key(api, tenant)
    member_key_data = await create_key(api, member, name="member's")
    # A member cannot revoke the owner's key: it does not exist for them.
    assert_error(
        await api.request("DELETE", f"{API}/api-keys/{tenant.key_id}", key=member), 404, "NOT_FOUND"
    )
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200
    # The owner (a tenant admin) can revoke a member's key.
    assert (
        await api.request("DELETE", f"{API}/api-keys/{member_key_data['id']}", key=tenant.key)
    ).status_code == 200
    assert_error(
        await api.request("GET", f"{API}/tenant", key=member_key_data["key"]), 401, "invalid_token"
    )


async def test_other_tenants_key_is_404(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    error = assert_error(
        await api.request("DELETE", f"{API}/api-keys/{other_tenant.key_id}", key=tenant.key),
        404,
        "NOT_FOUND",
    )
    assert error["message"] == "api key not found"
    assert (await api.request("GET", f"{API}/tenant", key=other_tenant.key)).status_code == 200
    assert_error(
        await api.request(
            "DELETE", f"{API}/api-keys/00000000-0000-4000-8000-000000000000", key=tenant.key
        ),
        404,
        "NOT_FOUND",
    )
    assert_error(
        await api.request("DELETE", f"{API}/api-keys/not-a-uuid", key=tenant.key), 400, "INVALID_ID"
    )


# --- source addresses ------------------------------------------------------------------


async def admin_key_with_ips(api: Api, tenant: Tenant, allowed_ips: Any) -> httpx.Response:
    return await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={
            "tenant_id": tenant.id,
            "user_id": tenant.owner_id,
            "name": "ips",
            "key_type": "user",
            "allowed_ips": allowed_ips,
        },
    )


async def test_allowed_ips_refuse_other_sources(api: Api, tenant: Tenant) -> None:
    response = await admin_key_with_ips(api, tenant, ["10.0.0.0/8"])
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert data["allowed_ips"] == ["10.0.0.0/8"]
    error = assert_error(
        await api.request("GET", f"{API}/tenant", key=data["key"]), 403, "FORBIDDEN"
    )
    assert "127.0.0.1" in error["message"]


async def test_allowed_ips_admit_matching_sources(api: Api, tenant: Tenant) -> None:
    for allowed in (["127.0.0.1/32"], ["127.0.0.1"], ["10.0.0.0/8", "127.0.0.0/8"]):
        response = await admin_key_with_ips(api, tenant, allowed)
        assert response.status_code == 201, response.text
        key = response.json()["data"]["key"]
        assert (await api.request("GET", f"{API}/tenant", key=key)).status_code == 200


async def test_allowed_ips_validation(api: Api, tenant: Tenant) -> None:
    for bad in (["not-an-ip"], "127.0.0.1", ["300.1.1.1/8"], ["10.0.0.0/99"]):
        error = assert_error(await admin_key_with_ips(api, tenant, bad), 422, "VALIDATION_ERROR")
        assert "allowed_ips" in error["details"]


# --- keys restricted to a workspace ----------------------------------------------------


async def restricted_key(api: Api, tenant: Tenant) -> tuple[str, dict[str, Any]]:
    """(workspace id, platform key restricted to that workspace), made by the tenant owner."""
    response = await api.request("POST", f"{API}/workspaces", key=tenant.key, json={"name": "Fenced"})
    workspace_id: str = response.json()["data"]["id"]
    return workspace_id, await create_key(api, tenant.key, key_type="platform", workspace_id=workspace_id)


async def test_restricted_key_cannot_mint_wider_keys(api: Api, tenant: Tenant) -> None:
    workspace_id, fenced = await restricted_key(api, tenant)
    for body in ({"key_type": "user"}, {"key_type": "platform", "workspace_id": tenant.workspace_id}):
        response = await api.request("POST", f"{API}/api-keys", key=fenced["key"], json={"name": "escape", **body})
        assert_error(response, 403, "FORBIDDEN")
    # A new key it makes stays inside the same workspace.
    child = await create_key(api, fenced["key"], key_type="platform")
    assert child["workspace_id"] == workspace_id
    listed = await api.request("GET", f"{API}/workspaces", key=child["key"])
    assert [w["id"] for w in listed.json()["data"]] == [workspace_id]


async def test_restricted_key_sees_and_revokes_only_its_workspace_keys(api: Api, tenant: Tenant) -> None:
    workspace_id, fenced = await restricted_key(api, tenant)
    listed = (await api.request("GET", f"{API}/api-keys", key=fenced["key"])).json()["data"]
    assert {k["id"] for k in listed} == {fenced["id"]}
    assert {k["workspace_id"] for k in listed} == {workspace_id}
    assert_error(await api.request("DELETE", f"{API}/api-keys/{tenant.key_id}", key=fenced["key"]), 404, "NOT_FOUND")
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200
