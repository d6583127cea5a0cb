"""Authentication: JWT sessions, password hashes, SSE tickets, and refused credentials."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt

from corral.actors.tenancy import tickets
from corral.http import tokens
from corral.storage import iso_in
from tests.support import ADMIN_KEY, API, PASSWORD, Api, Tenant, assert_error


def claims_of(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


# --- login and refresh -----------------------------------------------------------------


async def test_login_returns_tokens_and_user(api: Api, tenant: Tenant) -> None:
    session = await api.login(tenant.owner_email)
    assert session["user"] == {"id": tenant.owner_id, "email": tenant.owner_email}
    assert (
        session["token"]
        and session["refresh_token"]
        and session["token"] != session["refresh_token"]
    )
    access, refresh = claims_of(session["token"]), claims_of(session["refresh_token"])
    assert access["sub"] == refresh["sub"] == tenant.owner_id
    assert access["tid"] == tenant.id
    assert 3000 <= access["exp"] - access["iat"] <= 3700  # about an hour
    assert refresh["exp"] - refresh["iat"] == 7 * 24 * 3600
    assert session["expires_in"] == access["exp"] - access["iat"]


async def test_access_token_works_on_api_routes(api: Api, tenant: Tenant) -> None:
    token = (await api.login(tenant.owner_email))["token"]
    response = await api.request("GET", f"{API}/tenant", key=token)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["id"] == tenant.id
    assert response.json()["data"]["role"] == "owner"
    workspaces = await api.request("GET", f"{API}/workspaces", key=token)
    assert [w["id"] for w in workspaces.json()["data"]] == [tenant.workspace_id]
    created = await api.request(
        "POST", f"{API}/workspaces", key=token, json={"name": "From a session"}
    )
    assert created.status_code == 201, created.text


async def test_login_email_is_case_insensitive(api: Api, tenant: Tenant) -> None:
    session = await api.login(tenant.owner_email.upper())
    assert session["user"]["id"] == tenant.owner_id


async def test_refresh_returns_new_working_tokens(api: Api, tenant: Tenant) -> None:
    session = await api.login(tenant.owner_email)
    response = await api.client.post(
        f"{API}/auth/refresh", json={"refresh_token": session["refresh_token"]}
    )
    assert response.status_code == 200, response.text
    fresh = response.json()
    assert fresh["token"] and fresh["refresh_token"]
    assert fresh["token"] != session["token"]
    assert claims_of(fresh["refresh_token"])["typ"] == "refresh"
    assert (await api.request("GET", f"{API}/tenant", key=fresh["token"])).status_code == 200
    again = await api.client.post(
        f"{API}/auth/refresh", json={"refresh_token": fresh["refresh_token"]}
    )
    assert again.status_code == 200


async def test_refresh_token_refused_on_non_auth_endpoints(api: Api, tenant: Tenant) -> None:
    refresh = (await api.login(tenant.owner_email))["refresh_token"]
    for method, path in (
        ("GET", f"{API}/tenant"),
        ("GET", f"{API}/workspaces"),
        ("POST", f"{API}/auth/sse-ticket"),
        ("GET", f"{API}/api-keys"),
        ("POST", f"{API}/api-keys"),
        ("GET", f"{API}/admin/tenants"),
    ):
        response = await api.request(
            method, path, key=refresh, json={"name": "x"} if method == "POST" else None
        )
        assert_error(response, 401, "invalid_token")


async def test_access_token_refused_at_refresh(api: Api, tenant: Tenant) -> None:
    access = (await api.login(tenant.owner_email))["token"]
    response = await api.client.post(f"{API}/auth/refresh", json={"refresh_token": access})
    assert_error(response, 401, "invalid_token")


async def test_refresh_with_garbage_or_forged_tokens(api: Api, tenant: Tenant) -> None:
    forged = tokens.mint(
        "not-the-secret-" + "x" * 32,
        user_id=tenant.owner_id,
        tenant_id=tenant.id,
        token_type="refresh",
        ttl=600,
    )
    expired = tokens.mint(
        api.platform.jwt_secret,
        user_id=tenant.owner_id,
        tenant_id=tenant.id,
        token_type="refresh",
        ttl=-10,
    )
    for token in ("garbage", "a.b.c", forged, expired, tenant.key):
        response = await api.client.post(f"{API}/auth/refresh", json={"refresh_token": token})
        assert_error(response, 401, "invalid_token")
    assert_error(await api.client.post(f"{API}/auth/refresh", json={}), 400, "MISSING_PARAM")


async def test_refresh_refused_after_user_leaves_the_tenant(api: Api, tenant: Tenant) -> None:
    user_id, email = await api.create_user(tenant, "member")
    session = await api.login(email)
    await api.platform.db.execute("DELETE FROM tenant_members WHERE user_id = ?", (user_id,))
    assert_error(
        await api.client.post(
            f"{API}/auth/refresh", json={"refresh_token": session["refresh_token"]}
        ),
        401,
        "invalid_token",
    )
    assert_error(
        await api.request("GET", f"{API}/tenant", key=session["token"]), 401, "invalid_token"
    )


async def test_wrong_password_and_unknown_email(api: Api, tenant: Tenant) -> None:
    wrong = await api.client.post(
        f"{API}/auth/login", json={"email": tenant.owner_email, "password": "wrong password!"}
    )
    unknown = await api.client.post(
        f"{API}/auth/login", json={"email": "nobody@example.test", "password": PASSWORD}
    )
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json()["error"]["code"] == unknown.json()["error"]["code"]
    assert (
        wrong.json()["error"]["message"] == unknown.json()["error"]["message"]
    )  # no account enumeration
    assert "token" not in wrong.json()


async def test_login_missing_fields(api: Api, tenant: Tenant) -> None:
    for body, field in (
        ({}, "email"),
        ({"password": PASSWORD}, "email"),
        ({"email": tenant.owner_email}, "password"),
        ({"email": "  ", "password": PASSWORD}, "email"),
    ):
        error = assert_error(
            await api.client.post(f"{API}/auth/login", json=body), 400, "MISSING_PARAM"
        )
        assert error["message"] == f"{field} is required"
    assert_error(
        await api.client.post(f"{API}/auth/login", content=b"email=x"), 400, "INVALID_BODY"
    )


async def test_login_into_a_chosen_tenant(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    _, email = await api.create_user(tenant, "member")
    response = await api.client.post(
        f"{API}/auth/login",
        json={"email": email, "password": PASSWORD, "tenant_id": other_tenant.id},
    )
    assert_error(response, 422, "TENANT_RESOLUTION_FAILED")
    response = await api.client.post(
        f"{API}/auth/login",
        json={"email": email, "password": "wrong password", "tenant_id": other_tenant.id},
    )
    assert_error(response, 401, "UNAUTHORIZED")  # the password is checked before the tenant
    response = await api.client.post(
        f"{API}/auth/login", json={"email": email, "password": PASSWORD, "tenant_id": tenant.id}
    )
    assert response.status_code == 200
    assert response.json()["tenant_id"] == tenant.id


async def test_login_without_any_tenant(api: Api) -> None:
    created = await api.admin(
        "POST", f"{API}/admin/users", json={"email": "loner@example.test", "password": PASSWORD}
    )
    assert created.status_code == 201
    response = await api.client.post(
        f"{API}/auth/login", json={"email": "loner@example.test", "password": PASSWORD}
    )
    # A session without a tenant: enough to accept an invite (tests/http/test_invites.py),
    # refused by every tenant route.
    assert response.status_code == 200, response.text
    assert response.json()["tenant_id"] is None
    token = response.json()["token"]
    assert_error(await api.request("GET", f"{API}/tenant", key=token), 422, "TENANT_RESOLUTION_FAILED")
    assert_error(await api.request("GET", f"{API}/workspaces", key=token), 422, "TENANT_RESOLUTION_FAILED")


async def test_expired_or_forged_access_tokens(api: Api, tenant: Tenant) -> None:
    secret = api.platform.jwt_secret
    expired = tokens.mint(
        secret, user_id=tenant.owner_id, tenant_id=tenant.id, token_type="access", ttl=-5
    )
    forged = tokens.mint(
        "wrong-secret-" + "x" * 32,
        user_id=tenant.owner_id,
        tenant_id=tenant.id,
        token_type="access",
        ttl=600,
    )
    unsigned = jwt.encode(
        {"sub": tenant.owner_id, "tid": tenant.id, "typ": "access", "iss": "corral", "exp": 2**31},
        key="",
        algorithm="none",
    )
    other_typ = tokens.mint(
        secret, user_id=tenant.owner_id, tenant_id=tenant.id, token_type="stream", ttl=600
    )
    for token in (expired, forged, unsigned, other_typ):
        assert_error(await api.request("GET", f"{API}/tenant", key=token), 401, "invalid_token")


async def test_tampered_access_token_claims(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    token = (await api.login(tenant.owner_email))["token"]
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["tid"] = other_tenant.id
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    response = await api.request(
        "GET", f"{API}/tenant", key=f"{header}.{forged_payload}.{signature}"
    )
    assert_error(response, 401, "invalid_token")


# --- password storage ------------------------------------------------------------------


async def test_passwords_are_stored_as_argon2_hashes(api: Api, tenant: Tenant) -> None:
    await api.create_user(tenant, "admin")
    rows = await api.platform.db.fetch_all("SELECT * FROM users")
    assert len(rows) == 2
    for row in rows:
        assert row["password_hash"].startswith("$argon2id$")
        for value in row.values():
            assert PASSWORD not in str(value)


# --- SSE tickets -----------------------------------------------------------------------


async def test_sse_ticket_is_single_use(api: Api, tenant: Tenant) -> None:
    response = await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ticket"].startswith("sset_")
    assert body["expires_in"] == 60
    grant = await tickets.consume_ticket(api.platform.db, body["ticket"])
    assert grant is not None
    assert grant.tenant_id == tenant.id
    assert grant.user_id == tenant.owner_id
    assert grant.api_key_id == tenant.key_id
    assert await tickets.consume_ticket(api.platform.db, body["ticket"]) is None


async def test_sse_tickets_are_distinct_and_stored_as_digests(api: Api, tenant: Tenant) -> None:
    minted = [
        (await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)).json()["ticket"]
        for _ in range(3)
    ]
    assert len(set(minted)) == 3
    rows = await api.platform.db.fetch_all("SELECT * FROM sse_tickets")
    assert len(rows) == 3
    stored = json.dumps(rows)
    assert not any(ticket in stored or ticket[5:] in stored for ticket in minted)


async def test_sse_ticket_from_a_session_and_a_scoped_key(api: Api, tenant: Tenant) -> None:
    token = (await api.login(tenant.owner_email))["token"]
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=token)).json()["ticket"]
    grant = await tickets.consume_ticket(api.platform.db, ticket)
    assert grant is not None and grant.api_key_id is None and grant.user_id == tenant.owner_id
    assert grant.scopes is None

    created = await api.request(
        "POST", f"{API}/api-keys", key=tenant.key, json={"name": "ro", "scopes": ["org:read"]}
    )
    scoped = created.json()["data"]["key"]
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=scoped)).json()["ticket"]
    grant = await tickets.consume_ticket(api.platform.db, ticket)
    assert grant is not None and grant.scopes == frozenset({"org:read"})


async def test_expired_sse_ticket_is_refused(api: Api, tenant: Tenant) -> None:
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)).json()["ticket"]
    await api.platform.db.execute("UPDATE sse_tickets SET expires_at = ?", (iso_in(-1),))
    assert await tickets.consume_ticket(api.platform.db, ticket) is None
    assert await tickets.consume_ticket(api.platform.db, "sset_unknown") is None


async def test_sse_ticket_needs_a_bearer(api: Api) -> None:
    assert_error(await api.client.post(f"{API}/auth/sse-ticket"), 401, "invalid_token")
    assert_error(
        await api.request("POST", f"{API}/auth/sse-ticket", key=ADMIN_KEY),
        422,
        "TENANT_RESOLUTION_FAILED",
    )


# --- refused credentials ---------------------------------------------------------------


async def test_missing_malformed_and_unknown_credentials(api: Api, tenant: Tenant) -> None:
    headers: list[dict[str, str]] = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer  x"},
        {"Authorization": f"Basic {tenant.key}"},
        {"Authorization": tenant.key},
        {"Authorization": "Bearer msk_u_unknownkey0123456789"},
        {"Authorization": "Bearer msk_p_unknownkey0123456789"},
        {"Authorization": "Bearer msk_a_unknownkey0123456789"},
        {"Authorization": "Bearer msk_"},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": "Bearer a.b.c"},
        {"Authorization": f"Bearer {tenant.key}x"},
        {"Authorization": f"Bearer {tenant.key[:-1]}"},
    ]
    for header in headers:
        response = await api.client.get(f"{API}/tenant", headers=header)
        assert_error(response, 401, "invalid_token")
        assert tenant.key not in response.text


async def test_bearer_scheme_is_case_insensitive(api: Api, tenant: Tenant) -> None:
    response = await api.client.get(
        f"{API}/tenant", headers={"Authorization": f"bearer {tenant.key}"}
    )
    assert response.status_code == 200


async def test_key_of_a_user_who_left_is_refused(api: Api, tenant: Tenant) -> None:
    user_id, email = await api.create_user(tenant, "member")
    token = (await api.login(email))["token"]
    key = (await api.request("POST", f"{API}/api-keys", key=token, json={"name": "mine"})).json()[
        "data"
    ]["key"]
    assert (await api.request("GET", f"{API}/tenant", key=key)).status_code == 200
    await api.platform.db.execute("DELETE FROM tenant_members WHERE user_id = ?", (user_id,))
    assert_error(await api.request("GET", f"{API}/tenant", key=key), 401, "invalid_token")


async def test_bootstrap_admin_key_has_no_tenant(api: Api, tenant: Tenant) -> None:
    for method, path in (
        ("GET", f"{API}/tenant"),
        ("GET", f"{API}/workspaces"),
        ("GET", f"{API}/projects"),
        ("GET", f"{API}/api-keys"),
        ("GET", f"{API}/audit-log"),
        ("POST", f"{API}/workspaces"),
    ):
        response = await api.request(
            method, path, key=ADMIN_KEY, json={"name": "x"} if method == "POST" else None
        )
        assert_error(response, 422, "TENANT_RESOLUTION_FAILED")
    assert (await api.admin("GET", f"{API}/admin/tenants")).status_code == 200


async def test_non_admin_credentials_get_403_on_admin_routes(api: Api, tenant: Tenant) -> None:
    platform = await api.request(
        "POST", f"{API}/api-keys", key=tenant.key, json={"name": "p", "key_type": "platform"}
    )
    session = await api.login(tenant.owner_email)
    credentials = [tenant.key, platform.json()["data"]["key"], session["token"]]
    for credential in credentials:
        for method, path, body in (
            ("GET", f"{API}/admin/tenants", None),
            (
                "POST",
                f"{API}/admin/tenants",
                {"name": "x", "owner_email": "x@example.test", "owner_password": PASSWORD},
            ),
            ("POST", f"{API}/admin/users", {"email": "y@example.test", "password": PASSWORD}),
            (
                "POST",
                f"{API}/admin/api-keys",
                {"tenant_id": tenant.id, "name": "k", "key_type": "admin"},
            ),
            ("GET", f"{API}/admin/outbox", None),
            ("GET", f"{API}/admin/actors", None),
        ):
            response = await api.request(method, path, key=credential, json=body)
            assert_error(response, 403, "FORBIDDEN")
    # Nothing was created by the refused calls.
    assert len((await api.admin("GET", f"{API}/admin/tenants")).json()["data"]) == 1
    assert (
        await api.platform.db.fetch_value(
            "SELECT COUNT(*) FROM users WHERE email_lower = 'y@example.test'"
        )
        == 0
    )
