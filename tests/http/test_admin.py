"""Operator endpoints of contract §2: tenants, users, keys of every type, the outbox."""

from __future__ import annotations

from typing import Any

from corral.actors.tenancy import PRODUCT_SCOPES, outbox
from corral.ids import is_uuid
from tests.support import ADMIN_KEY, API, PASSWORD, Api, Tenant, assert_error

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


def tenant_body(email: str, **extra: Any) -> dict[str, Any]:
    return {"name": "Acme", "owner_email": email, "owner_password": PASSWORD, **extra}


# --- tenants ---------------------------------------------------------------------------


async def test_create_tenant_response_shape(api: Api) -> None:
    response = await api.admin("POST", f"{API}/admin/tenants", json=tenant_body("boss@acme.test"))
    assert response.status_code == 201, response.text
    data = response.json()["data"]

    tenant = data["tenant"]
    assert set(tenant) >= {"id", "name", "created_at"}
    assert is_uuid(tenant["id"]) and tenant["name"] == "Acme" and tenant["created_at"]

    owner = data["owner"]
    assert (
        set(owner) >= {"id", "email"}
        and is_uuid(owner["id"])
        and owner["email"] == "boss@acme.test"
    )
    assert "password" not in str(owner) and PASSWORD not in response.text

    key = data["api_key"]
    assert set(key) >= {"id", "key", "key_prefix", "name", "key_type", "scopes"}
    assert key["key"].startswith("msk_u_") and key["key"].startswith(key["key_prefix"])
    assert key["key_type"] == "user"
    assert set(key["scopes"]) == set(PRODUCT_SCOPES)
    assert key["user_id"] == owner["id"] and key["tenant_id"] == tenant["id"]

    workspace, project = data["workspace"], data["project"]
    assert (
        workspace["slug"] == "default"
        and workspace["is_default"] is True
        and workspace["tenant_id"] == tenant["id"]
    )
    assert (
        project["slug"] == "default"
        and project["is_default"] is True
        and project["workspace_id"] == workspace["id"]
    )


async def test_new_tenant_is_usable_at_once(api: Api, tenant: Tenant) -> None:
    me = await api.request("GET", f"{API}/tenant", key=tenant.key)
    assert me.status_code == 200
    assert me.json()["data"]["role"] == "owner"
    workspaces = (await api.request("GET", f"{API}/workspaces", key=tenant.key)).json()["data"]
    assert [(w["id"], w["slug"], w["role"]) for w in workspaces] == [
        (tenant.workspace_id, "default", "owner")
    ]
    projects = (await api.request("GET", f"{API}/projects", key=tenant.key)).json()["data"]
    assert [(p["id"], p["slug"]) for p in projects] == [(tenant.project_id, "default")]
    member = await api.platform.db.fetch_one(
        "SELECT role FROM workspace_members WHERE workspace_id = ? AND user_id = ?",
        (tenant.workspace_id, tenant.owner_id),
    )
    assert member is not None and member["role"] == "owner"
    session = await api.login(tenant.owner_email)
    assert session["user"]["id"] == tenant.owner_id


async def test_list_tenants(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    response = await api.admin("GET", f"{API}/admin/tenants")
    assert response.status_code == 200
    listed = response.json()["data"]
    assert {t["id"] for t in listed} == {
        tenant.id,
        other_tenant.id,
    }  # fixtures are made concurrently
    assert {t["name"] for t in listed} == {tenant.name, "Other"}
    for entry in listed:
        assert set(entry) >= {"id", "name", "created_at"}
    assert tenant.key not in response.text


async def test_list_tenants_empty(api: Api) -> None:
    response = await api.admin("GET", f"{API}/admin/tenants")
    assert response.status_code == 200
    assert response.json() == {"data": []}


async def test_create_tenant_validation(api: Api) -> None:
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({}, {"name", "owner_email", "owner_password"}),
        (tenant_body("x@y.test", name=""), {"name"}),
        (tenant_body("x@y.test", name=5), {"name"}),
        (tenant_body("not-an-email"), {"owner_email"}),
        (tenant_body("@nobody"), {"owner_email"}),
        (tenant_body("x@y.test", owner_password="short"), {"owner_password"}),
        (tenant_body("x@y.test", owner_password=12345678), {"owner_password"}),
        (tenant_body("x@y.test", credits=-1), {"credits"}),
        (tenant_body("x@y.test", credits=1.5), {"credits"}),
        (tenant_body("x@y.test", credits="10"), {"credits"}),
    ]
    for body, fields in cases:
        error = assert_error(
            await api.admin("POST", f"{API}/admin/tenants", json=body), 422, "VALIDATION_ERROR"
        )
        assert set(error["details"]) == fields, (body, error)
    assert (await api.admin("GET", f"{API}/admin/tenants")).json()["data"] == []


async def test_create_tenant_with_credits_is_accepted(api: Api) -> None:
    response = await api.admin(
        "POST", f"{API}/admin/tenants", json=tenant_body("rich@acme.test", credits=100)
    )
    assert response.status_code == 201, response.text


async def test_owner_email_must_be_unused(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST", f"{API}/admin/tenants", json=tenant_body(tenant.owner_email.upper())
    )
    assert_error(response, 409, "EMAIL_TAKEN")
    assert len((await api.admin("GET", f"{API}/admin/tenants")).json()["data"]) == 1


async def test_admin_routes_need_credentials(api: Api) -> None:
    for method, path in (
        ("GET", "/admin/tenants"),
        ("POST", "/admin/tenants"),
        ("GET", "/admin/outbox"),
    ):
        assert_error(await api.request(method, f"{API}{path}", json={}), 401, "invalid_token")


# --- users -----------------------------------------------------------------------------


async def test_create_user_in_tenant(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/users",
        json={
            "email": "dev@acme.test",
            "password": PASSWORD,
            "name": "Dev",
            "tenant_id": tenant.id,
            "role": "admin",
        },
    )
    assert response.status_code == 201, response.text
    user = response.json()["data"]["user"]
    assert is_uuid(user["id"]) and user["email"] == "dev@acme.test" and user["name"] == "Dev"
    assert PASSWORD not in response.text

    session = await api.login("dev@acme.test")
    assert session["user"]["id"] == user["id"]
    me = (await api.request("GET", f"{API}/tenant", key=session["token"])).json()["data"]
    assert me["id"] == tenant.id and me["role"] == "admin"
    workspaces = (await api.request("GET", f"{API}/workspaces", key=session["token"])).json()[
        "data"
    ]
    assert [(w["id"], w["role"]) for w in workspaces] == [(tenant.workspace_id, "admin")]


async def test_create_user_default_role_is_member(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/users",
        json={"email": "m@acme.test", "password": PASSWORD, "tenant_id": tenant.id},
    )
    assert response.status_code == 201, response.text
    token = (await api.login("m@acme.test"))["token"]
    assert (await api.request("GET", f"{API}/tenant", key=token)).json()["data"]["role"] == "member"
    workspace = await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=token)
    assert workspace.status_code == 200
    assert workspace.json()["data"]["role"] == "member"


async def test_create_user_without_tenant(api: Api) -> None:
    response = await api.admin(
        "POST", f"{API}/admin/users", json={"email": "free@acme.test", "password": PASSWORD}
    )
    assert response.status_code == 201
    assert response.json()["data"]["user"]["name"] is None
    assert await api.platform.db.fetch_value("SELECT COUNT(*) FROM tenant_members") == 0


async def test_create_user_unknown_tenant(api: Api) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/users",
        json={"email": "lost@acme.test", "password": PASSWORD, "tenant_id": UNKNOWN_ID},
    )
    error = assert_error(response, 404, "NOT_FOUND")
    assert error["message"] == "tenant not found"
    assert await api.platform.db.fetch_value("SELECT COUNT(*) FROM users") == 0


async def test_create_user_validation(api: Api, tenant: Tenant) -> None:
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({}, {"email", "password"}),
        ({"email": "a@b.test", "password": "short"}, {"password"}),
        ({"email": "nope", "password": PASSWORD}, {"email"}),
        ({"email": "a@b.test", "password": PASSWORD, "tenant_id": "acme"}, {"tenant_id"}),
        (
            {"email": "a@b.test", "password": PASSWORD, "tenant_id": tenant.id, "role": "emperor"},
            {"role"},
        ),
        ({"email": "a@b.test", "password": PASSWORD, "name": 3}, {"name"}),
    ]
    for body, fields in cases:
        error = assert_error(
            await api.admin("POST", f"{API}/admin/users", json=body), 422, "VALIDATION_ERROR"
        )
        assert set(error["details"]) == fields, (body, error)


async def test_create_user_duplicate_email(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST", f"{API}/admin/users", json={"email": tenant.owner_email, "password": PASSWORD}
    )
    assert_error(response, 409, "EMAIL_TAKEN")


# --- api keys --------------------------------------------------------------------------


async def test_admin_creates_keys_of_every_type(api: Api, tenant: Tenant) -> None:
    for key_type, prefix in (("user", "msk_u_"), ("platform", "msk_p_"), ("admin", "msk_a_")):
        response = await api.admin(
            "POST",
            f"{API}/admin/api-keys",
            json={
                "tenant_id": tenant.id,
                "user_id": tenant.owner_id,
                "name": key_type,
                "key_type": key_type,
            },
        )
        assert response.status_code == 201, response.text
        data = response.json()["data"]
        assert data["key"].startswith(prefix)
        assert data["key_type"] == key_type
        assert data["tenant_id"] == tenant.id
        assert data["status"] == "active"
        me = await api.request("GET", f"{API}/tenant", key=data["key"])
        assert me.status_code == 200 and me.json()["data"]["id"] == tenant.id
        admin_route = await api.request("GET", f"{API}/admin/tenants", key=data["key"])
        assert admin_route.status_code == (200 if key_type == "admin" else 403)


async def test_created_admin_key_can_operate(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "name": "ops", "key_type": "admin"},
    )
    admin_key = response.json()["data"]["key"]
    created = await api.request(
        "POST", f"{API}/admin/tenants", key=admin_key, json=tenant_body("second@acme.test")
    )
    assert created.status_code == 201, created.text
    assert (
        len((await api.request("GET", f"{API}/admin/tenants", key=admin_key)).json()["data"]) == 2
    )
    # Revoked like any other key.
    await api.platform.db.execute(
        "UPDATE api_keys SET status = 'revoked' WHERE id = ?", (response.json()["data"]["id"],)
    )
    assert_error(
        await api.request("GET", f"{API}/admin/tenants", key=admin_key), 401, "invalid_token"
    )


async def test_admin_key_scopes_and_defaults(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={
            "tenant_id": tenant.id,
            "user_id": tenant.owner_id,
            "name": "ro",
            "key_type": "user",
            "scopes": ["org:read"],
        },
    )
    assert response.status_code == 201
    data = response.json()["data"]
    assert data["scopes"] == ["org:read"]
    assert data["rate_limit_rpm"] == 600
    assert (await api.request("GET", f"{API}/workspaces", key=data["key"])).status_code == 200
    assert_error(
        await api.request("GET", f"{API}/api-keys", key=data["key"]), 403, "insufficient_scope"
    )

    default = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "name": "all", "key_type": "platform"},
    )
    assert set(default.json()["data"]["scopes"]) == set(PRODUCT_SCOPES)
    assert default.json()["data"]["rate_limit_rpm"] == 30_000


async def test_admin_key_for_unknown_tenant(api: Api) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": UNKNOWN_ID, "name": "x", "key_type": "user"},
    )
    error = assert_error(response, 404, "NOT_FOUND")
    assert error["message"] == "tenant not found"


async def test_admin_key_validation(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "tenant_id"),
        ({"tenant_id": tenant.id, "key_type": "user"}, "name"),
        ({"tenant_id": tenant.id, "name": "x"}, "key_type"),
        ({"tenant_id": tenant.id, "name": "x", "key_type": "root"}, "key_type"),
        ({"tenant_id": "t1", "name": "x", "key_type": "user"}, "tenant_id"),
        ({"tenant_id": tenant.id, "name": "x", "key_type": "user", "user_id": "u1"}, "user_id"),
        (
            {
                "tenant_id": tenant.id,
                "name": "x",
                "key_type": "user",
                "user_id": other_tenant.owner_id,
            },
            "user_id",
        ),
        (
            {
                "tenant_id": tenant.id,
                "name": "x",
                "key_type": "platform",
                "workspace_id": other_tenant.workspace_id,
            },
            "workspace_id",
        ),
        (
            {"tenant_id": tenant.id, "name": "x", "key_type": "user", "scopes": ["nope:nope"]},
            "scopes",
        ),
    ]
    for body, field in cases:
        error = assert_error(
            await api.admin("POST", f"{API}/admin/api-keys", json=body), 422, "VALIDATION_ERROR"
        )
        assert field in error["details"], (body, error)


async def test_admin_key_restricted_to_workspace(api: Api, tenant: Tenant) -> None:
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={
            "tenant_id": tenant.id,
            "user_id": tenant.owner_id,
            "name": "ws",
            "key_type": "platform",
            "workspace_id": tenant.workspace_id,
        },
    )
    assert response.status_code == 201, response.text
    assert response.json()["data"]["workspace_id"] == tenant.workspace_id


async def test_admin_key_without_user_acts_tenant_wide(api: Api, tenant: Tenant) -> None:
    """A platform key is tenant-wide automation: made by the operator without a user, it still sees the tenant."""
    created = await api.request(
        "POST", f"{API}/workspaces", key=tenant.key, json={"name": "Second"}
    )
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "name": "bot", "key_type": "platform"},
    )
    key = response.json()["data"]["key"]
    listed = await api.request("GET", f"{API}/workspaces", key=key)
    assert listed.status_code == 200
    assert {w["id"] for w in listed.json()["data"]} == {
        tenant.workspace_id,
        created.json()["data"]["id"],
    }
    assert (
        await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=key)
    ).status_code == 200
    project = await api.request("POST", f"{API}/projects", key=key, json={"name": "Made by a bot"})
    assert project.status_code == 201, project.text


# --- outbox and actors -----------------------------------------------------------------


async def test_outbox_shape_newest_first(api: Api) -> None:
    response = await api.admin("GET", f"{API}/admin/outbox")
    assert response.status_code == 200
    assert response.json() == {"data": []}
    first = await outbox.queue_mail(api.platform.db, "a@acme.test", "Hello", "first body")
    second = await outbox.queue_mail(api.platform.db, "b@acme.test", "Again", "second body")
    mails = (await api.admin("GET", f"{API}/admin/outbox")).json()["data"]
    assert [m["id"] for m in mails] == [second, first]
    for mail in mails:
        assert set(mail) == {"id", "to", "subject", "body", "created_at"}
    assert mails[1] | {"created_at": None} == {
        "id": first,
        "to": "a@acme.test",
        "subject": "Hello",
        "body": "first body",
        "created_at": None,
    }


async def test_actor_introspection_answers(api: Api) -> None:
    response = await api.admin("GET", f"{API}/admin/actors")
    assert response.status_code == 200
    assert isinstance(response.json()["data"], list)
    assert_error(
        await api.admin("GET", f"{API}/admin/actors/computer/{UNKNOWN_ID}"), 404, "NOT_FOUND"
    )


async def test_bootstrap_key_reaches_admin_only(api: Api) -> None:
    assert (await api.request("GET", f"{API}/admin/tenants", key=ADMIN_KEY)).status_code == 200
    assert_error(
        await api.request("GET", f"{API}/admin/tenants", key=ADMIN_KEY + "x"), 401, "invalid_token"
    )
