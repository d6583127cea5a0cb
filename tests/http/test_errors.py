"""The error envelope, request ids, rate limits and their headers, as a client sees them."""

from __future__ import annotations

import time
from typing import Any

import httpx
import trio

from tests.support import ADMIN_KEY, API, Api, Tenant, assert_error


def assert_rate_headers(response: httpx.Response, limit: int | None = None) -> tuple[int, int]:
    """The three X-RateLimit headers, coherent with each other; returns (limit, remaining)."""
    headers = response.headers
    got_limit = int(headers["X-RateLimit-Limit"])
    remaining = int(headers["X-RateLimit-Remaining"])
    reset = int(headers["X-RateLimit-Reset"])
    assert 0 <= remaining <= got_limit
    now = time.time()
    assert now - 2 <= reset <= now + 62, (reset, now)
    if limit is not None:
        assert got_limit == limit
    assert headers["X-Request-Id"]
    return got_limit, remaining


async def fresh_window(margin: float = 2.0) -> None:
    """Rate windows are whole minutes: wait for the next one when this one is about to end."""
    left = 60 - time.time() % 60
    if left < margin:
        await trio.sleep(left + 0.05)


async def key_with_rpm(api: Api, tenant: Tenant, rpm: int) -> str:
    response = await api.request(
        "POST",
        f"{API}/api-keys",
        key=tenant.key,
        json={"name": "slow", "key_type": "user", "rate_limit_rpm": rpm},
    )
    assert response.status_code == 201, response.text
    assert response.json()["data"]["rate_limit_rpm"] == rpm
    key: str = response.json()["data"]["key"]
    return key


# --- request ids and headers -----------------------------------------------------------


async def test_healthz_is_plain_and_unlimited(api: Api) -> None:
    for _ in range(3):
        response = await api.client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert "X-RateLimit-Limit" not in response.headers
        assert "X-RateLimit-Remaining" not in response.headers


async def test_success_carries_request_id_and_rate_headers(api: Api, tenant: Tenant) -> None:
    first = await api.request("GET", f"{API}/tenant", key=tenant.key)
    second = await api.request("GET", f"{API}/tenant", key=tenant.key)
    assert first.status_code == second.status_code == 200
    limit, remaining_1 = assert_rate_headers(first, 600)
    _, remaining_2 = assert_rate_headers(second, 600)
    assert remaining_2 == remaining_1 - 1 or remaining_2 == limit - 1  # unless a new window began
    assert first.headers["X-Request-Id"] != second.headers["X-Request-Id"]


async def test_every_error_kind_carries_the_headers(api: Api, tenant: Tenant) -> None:
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("GET", f"{API}/tenant", {}, 401, "invalid_token"),
        ("GET", f"{API}/tenant", {"key": "msk_u_nope"}, 401, "invalid_token"),
        ("GET", f"{API}/admin/tenants", {"key": tenant.key}, 403, "FORBIDDEN"),
        ("GET", f"{API}/no-such-route", {"key": tenant.key}, 404, "NOT_FOUND"),
        ("GET", f"{API}/no-such-route", {}, 404, "NOT_FOUND"),
        ("GET", "/definitely/not/here", {}, 404, "NOT_FOUND"),
        ("GET", f"{API}/workspaces/not-a-uuid", {"key": tenant.key}, 400, "INVALID_ID"),
        (
            "GET",
            f"{API}/workspaces/00000000-0000-4000-8000-000000000000",
            {"key": tenant.key},
            404,
            "NOT_FOUND",
        ),
        ("DELETE", f"{API}/tenant", {"key": tenant.key}, 405, "METHOD_NOT_ALLOWED"),
        ("PUT", f"{API}/auth/login", {}, 405, "METHOD_NOT_ALLOWED"),
        ("POST", f"{API}/workspaces", {"key": tenant.key, "json": {}}, 422, "VALIDATION_ERROR"),
        (
            "POST",
            f"{API}/workspaces",
            {"key": tenant.key, "content": b"{nope"},
            400,
            "INVALID_BODY",
        ),
        ("GET", f"{API}/tenant", {"key": ADMIN_KEY}, 422, "TENANT_RESOLUTION_FAILED"),
    ]
    for method, path, kwargs, status, code in cases:
        response = await api.request(method, path, **kwargs)
        assert_error(response, status, code)
        assert_rate_headers(response)


async def test_request_ids_are_unique(api: Api) -> None:
    ids = set()
    for _ in range(5):
        response = await api.client.get(f"{API}/tenant")
        ids.add(assert_error(response, 401, "invalid_token")["request_id"])
    assert len(ids) == 5


async def test_openapi_document_carries_the_headers(api: Api) -> None:
    response = await api.client.get(f"{API}/openapi.json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.1")
    assert_rate_headers(response)


# --- bodies ----------------------------------------------------------------------------


async def post_raw(api: Api, tenant: Tenant, content: bytes) -> httpx.Response:
    """POST `content` as an application/json body to a route that reads one."""
    return await api.request(
        "POST", f"{API}/workspaces", key=tenant.key, content=content, headers={"Content-Type": "application/json"}
    )


async def test_non_json_body_is_invalid_body(api: Api, tenant: Tenant) -> None:
    for content in (b"name=x", b'{"name": ', b"\xff\xfe\x00garbage", b"NaNx"):
        response = await post_raw(api, tenant, content)
        assert_error(response, 400, "INVALID_BODY")
        assert_rate_headers(response)


async def test_json_that_is_not_an_object_is_invalid_body(api: Api, tenant: Tenant) -> None:
    for content in (b'[{"name": "x"}]', b'"name"', b"42", b"null", b"true"):
        response = await post_raw(api, tenant, content)
        error = assert_error(response, 400, "INVALID_BODY")
        assert "object" in error["message"]


async def test_invalid_body_on_public_auth_endpoints(api: Api) -> None:
    response = await api.client.post(f"{API}/auth/login", content=b"not json")
    assert_error(response, 400, "INVALID_BODY")
    response = await api.client.post(f"{API}/auth/refresh", json=["refresh_token"])
    assert_error(response, 400, "INVALID_BODY")


async def test_unknown_fields_are_ignored(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "POST",
        f"{API}/workspaces",
        key=tenant.key,
        json={"name": "Extra", "colour": "blue", "nested": {"a": [1]}},
    )
    assert response.status_code == 201, response.text
    assert "colour" not in response.json()["data"]


async def test_validation_error_has_per_field_details(api: Api, tenant: Tenant) -> None:
    response = await api.admin("POST", f"{API}/admin/tenants", json={})
    error = assert_error(response, 422, "VALIDATION_ERROR")
    assert set(error["details"]) == {"name", "owner_email", "owner_password"}
    assert all(isinstance(message, str) and message for message in error["details"].values())

    response = await api.admin(
        "POST",
        f"{API}/admin/tenants",
        json={
            "name": "Fine",
            "owner_email": "no-at-sign",
            "owner_password": "short",
            "credits": "lots",
        },
    )
    error = assert_error(response, 422, "VALIDATION_ERROR")
    assert set(error["details"]) == {"owner_email", "owner_password", "credits"}

    response = await api.request(
        "POST", f"{API}/workspaces", key=tenant.key, json={"name": 7, "slug": "Not A Slug"}
    )
    error = assert_error(response, 422, "VALIDATION_ERROR")
    assert set(error["details"]) == {"name", "slug"}
    assert_rate_headers(response)


async def test_errors_without_details_have_no_details(api: Api, tenant: Tenant) -> None:
    response = await api.request("GET", f"{API}/workspaces/nope", key=tenant.key)
    error = assert_error(response, 400, "INVALID_ID")
    assert "details" not in error


async def test_oversized_body_is_an_envelope(api: Api, tenant: Tenant) -> None:
    response = await post_raw(api, tenant, b"x" * (12 * 1024 * 1024))
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert_rate_headers(response)


async def test_no_bare_500_for_pathological_json(api: Api, tenant: Tenant) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    response = await post_raw(api, tenant, deep)
    assert_error(response, 400, "INVALID_BODY")
    deep_object = b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = await post_raw(api, tenant, deep_object)
    assert_error(response, 400, "INVALID_BODY")
    # The server is still healthy afterwards.
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200


async def test_wrong_types_in_fields_are_not_500(api: Api, tenant: Tenant) -> None:
    bodies: list[tuple[str, str, Any]] = [
        ("POST", f"{API}/api-keys", {"name": ["x"], "key_type": {"a": 1}}),
        ("POST", f"{API}/api-keys", {"name": "x", "scopes": "org:read"}),
        ("POST", f"{API}/api-keys", {"name": "x", "rate_limit_rpm": "10"}),
        ("POST", f"{API}/api-keys", {"name": "x", "key_type": "platform", "workspace_id": 5}),
        ("POST", f"{API}/projects", {"name": "x", "workspace_id": 12}),
        ("POST", f"{API}/projects", {"name": "x", "workspace_id": ["a"]}),
        ("PATCH", f"{API}/workspaces/{tenant.workspace_id}", {"name": 3}),
        ("POST", f"{API}/auth/login", {"email": 1, "password": 2}),
        ("POST", f"{API}/auth/refresh", {"refresh_token": 12}),
    ]
    for method, path, body in bodies:
        response = await api.request(method, path, key=tenant.key, json=body)
        assert 400 <= response.status_code < 500, (path, body, response.text)
        assert response.json()["error"]["request_id"] == response.headers["X-Request-Id"]


# --- rate limits -----------------------------------------------------------------------


async def test_key_rate_limit_answers_429_with_retry_after(api: Api, tenant: Tenant) -> None:
    key = await key_with_rpm(api, tenant, 3)
    await fresh_window()
    remaining = []
    for _ in range(3):
        response = await api.request("GET", f"{API}/tenant", key=key)
        assert response.status_code == 200, response.text
        remaining.append(assert_rate_headers(response, 3)[1])
    assert remaining == [2, 1, 0]

    limited = await api.request("GET", f"{API}/tenant", key=key)
    error = assert_error(limited, 429, "RATE_LIMITED")
    assert "3" in error["message"]
    assert_rate_headers(limited)
    retry_after = int(limited.headers["Retry-After"])
    assert 1 <= retry_after <= 60

    # Mutations and errors are limited too; the 429 wins before the route runs.
    assert_error(
        await api.request("POST", f"{API}/workspaces", key=key, json={"name": "x"}),
        429,
        "RATE_LIMITED",
    )
    assert_error(await api.request("GET", f"{API}/admin/tenants", key=key), 429, "RATE_LIMITED")

    # Other keys of the same user have their own buckets.
    other = await api.request("GET", f"{API}/tenant", key=tenant.key)
    assert other.status_code == 200
    assert_rate_headers(other, 600)


async def test_429_headers_describe_the_exhausted_bucket(api: Api, tenant: Tenant) -> None:
    key = await key_with_rpm(api, tenant, 1)
    await fresh_window()
    assert (await api.request("GET", f"{API}/tenant", key=key)).status_code == 200
    limited = await api.request("GET", f"{API}/tenant", key=key)
    assert_error(limited, 429, "RATE_LIMITED")
    assert_rate_headers(limited, 1)
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    retry_after = int(limited.headers["Retry-After"])
    assert abs(int(limited.headers["X-RateLimit-Reset"]) - (time.time() + retry_after)) <= 2


async def test_rate_limit_rpm_bounds(api: Api, tenant: Tenant) -> None:
    for rpm in (0, -5, 601):
        response = await api.request(
            "POST",
            f"{API}/api-keys",
            key=tenant.key,
            json={"name": "x", "key_type": "user", "rate_limit_rpm": rpm},
        )
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert "rate_limit_rpm" in error["details"]


async def test_platform_key_limit_is_30000(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "POST", f"{API}/api-keys", key=tenant.key, json={"name": "p", "key_type": "platform"}
    )
    assert response.status_code == 201, response.text
    key = response.json()["data"]["key"]
    assert_rate_headers(await api.request("GET", f"{API}/tenant", key=key), 30_000)


async def test_jwt_sessions_are_rate_limited_per_user(api: Api, tenant: Tenant) -> None:
    session = await api.login(tenant.owner_email)
    response = await api.request("GET", f"{API}/tenant", key=session["token"])
    assert response.status_code == 200
    assert_rate_headers(response, 600)


async def test_public_auth_endpoints_allow_60_per_minute_per_ip(api: Api, tenant: Tenant) -> None:
    await fresh_window()
    for n in range(60):
        response = await api.client.post(f"{API}/auth/refresh", json={})
        assert_error(response, 400, "MISSING_PARAM")
        _, remaining = assert_rate_headers(response, 60)
        assert remaining == 59 - n
    limited = await api.client.post(f"{API}/auth/refresh", json={})
    assert_error(limited, 429, "RATE_LIMITED")
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    # Login shares the per-IP bucket, even with correct credentials.
    login = await api.client.post(
        f"{API}/auth/login", json={"email": tenant.owner_email, "password": "x" * 10}
    )
    assert_error(login, 429, "RATE_LIMITED")
    # Key-authenticated routes are not affected by the auth bucket.
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200


async def test_rate_limited_key_is_still_identified_by_revocation(api: Api, tenant: Tenant) -> None:
    """A revoked key is 401 even when its bucket is empty: the credential is checked first."""
    key = await key_with_rpm(api, tenant, 1)
    await fresh_window()
    keys = await api.request("GET", f"{API}/api-keys", key=tenant.key)
    key_id = next(k["id"] for k in keys.json()["data"] if k["rate_limit_rpm"] == 1)
    assert (await api.request("GET", f"{API}/tenant", key=key)).status_code == 200
    assert_error(await api.request("GET", f"{API}/tenant", key=key), 429, "RATE_LIMITED")
    assert (
        await api.request("DELETE", f"{API}/api-keys/{key_id}", key=tenant.key)
    ).status_code == 200
    assert_error(await api.request("GET", f"{API}/tenant", key=key), 401, "invalid_token")
