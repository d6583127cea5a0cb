"""Per-end-user quotas: the endpoints, and enforcement on real sandboxes."""

from __future__ import annotations

from typing import Any

from tests.support import API, Api, Tenant, assert_error, create_key, member_key

LIMITS = ("max_sandboxes", "max_concurrent", "max_storage_gb", "max_credit_cents")


def quota_path(external_user_id: str) -> str:
    return f"{API}/quotas/external/{external_user_id}"


async def put(api: Api, key: str, external_user_id: str, body: Any) -> Any:
    return await api.request("PUT", quota_path(external_user_id), key=key, json=body)


async def test_quota_lifecycle(api: Api, tenant: Tenant) -> None:
    assert_error(await api.request("GET", quota_path("user-1"), key=tenant.key), 404, "not_found")
    response = await put(api, tenant.key, "user-1", {"max_sandboxes": 5, "max_concurrent": 2})
    assert response.status_code == 200, response.text
    quota = response.json()["data"]
    assert quota["external_user_id"] == "user-1"
    assert quota["limits"] == {"max_sandboxes": 5, "max_concurrent": 2, "max_storage_gb": None, "max_credit_cents": None}
    assert quota["usage"]["total_sandboxes"] == 0 and quota["usage"]["concurrent"] == 0
    got = await api.request("GET", quota_path("user-1"), key=tenant.key)
    assert got.status_code == 200 and got.json()["data"]["limits"] == quota["limits"]

    # PUT replaces: what is omitted becomes uncapped.
    replaced = (await put(api, tenant.key, "user-1", {"max_storage_gb": 0, "max_credit_cents": 500})).json()["data"]
    assert replaced["limits"] == {"max_sandboxes": None, "max_concurrent": None, "max_storage_gb": 0, "max_credit_cents": 500}
    assert (await put(api, tenant.key, "user-1", {})).json()["data"]["limits"] == dict.fromkeys(LIMITS)

    deleted = await api.request("DELETE", quota_path("user-1"), key=tenant.key)
    assert deleted.status_code == 204 and deleted.content == b""
    assert_error(await api.request("GET", quota_path("user-1"), key=tenant.key), 404, "not_found")
    assert_error(await api.request("DELETE", quota_path("user-1"), key=tenant.key), 404, "not_found")


async def test_external_ids_are_opaque_strings(api: Api, tenant: Tenant) -> None:
    for external_id in ("alice@example.com", "org:42|user 7", "ü-ñ"):
        response = await api.request("PUT", quota_path(external_id.replace(" ", "%20").replace("|", "%7C")), key=tenant.key, json={"max_concurrent": 1})
        assert response.status_code == 200, response.text
        assert response.json()["data"]["external_user_id"] == external_id
    response = await put(api, tenant.key, "x" * 256, {})
    assert_error(response, 422, "VALIDATION_ERROR")


async def test_quota_validation(api: Api, tenant: Tenant) -> None:
    for body, field in (
        ({"max_sandboxes": -1}, "max_sandboxes"),
        ({"max_concurrent": 1.5}, "max_concurrent"),
        ({"max_storage_gb": "10"}, "max_storage_gb"),
        ({"max_credit_cents": True}, "max_credit_cents"),
        ({"max_sandboxes": [1]}, "max_sandboxes"),
    ):
        error = assert_error(await put(api, tenant.key, "user-v", body), 422, "VALIDATION_ERROR")
        assert set(error["details"]) == {field}, body
    error = assert_error(await put(api, tenant.key, "user-v", {"max_sandboxes": -1, "max_concurrent": "2"}), 422, "VALIDATION_ERROR")
    assert set(error["details"]) == {"max_sandboxes", "max_concurrent"}
    assert_error(await api.request("PUT", quota_path("user-v"), key=tenant.key, content=b"[1"), 400, "INVALID_BODY")
    assert_error(await api.request("GET", quota_path("user-v"), key=tenant.key), 404, "not_found")


async def test_quota_writes_need_a_tenant_admin_and_the_org_scopes(api: Api, tenant: Tenant) -> None:
    await put(api, tenant.key, "user-r", {"max_concurrent": 3})
    _, member = await member_key(api, tenant, "member")
    assert (await api.request("GET", quota_path("user-r"), key=member)).status_code == 200
    assert_error(await put(api, member, "user-r", {"max_concurrent": 99}), 403, "FORBIDDEN")
    assert_error(await api.request("DELETE", quota_path("user-r"), key=member), 403, "FORBIDDEN")
    narrow = await create_key(api, tenant.key, key_type="user", scopes=["org:read"])
    assert (await api.request("GET", quota_path("user-r"), key=narrow["key"])).status_code == 200
    assert_error(await put(api, narrow["key"], "user-r", {}), 403, "insufficient_scope")
    none = await create_key(api, tenant.key, key_type="user", scopes=["sandboxes:read"])
    assert_error(await api.request("GET", quota_path("user-r"), key=none["key"]), 403, "insufficient_scope")
    got = await api.request("GET", quota_path("user-r"), key=tenant.key)
    assert got.json()["data"]["limits"]["max_concurrent"] == 3


async def test_quotas_belong_to_one_tenant(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    await put(api, tenant.key, "shared-name", {"max_sandboxes": 1})
    assert_error(await api.request("GET", quota_path("shared-name"), key=other_tenant.key), 404, "not_found")
    assert_error(await api.request("DELETE", quota_path("shared-name"), key=other_tenant.key), 404, "not_found")
    theirs = await put(api, other_tenant.key, "shared-name", {"max_sandboxes": 9})
    assert theirs.json()["data"]["limits"]["max_sandboxes"] == 9
    mine = await api.request("GET", quota_path("shared-name"), key=tenant.key)
    assert mine.json()["data"]["limits"]["max_sandboxes"] == 1


async def test_storage_and_credit_caps_refuse_before_anything_runs(api: Api, tenant: Tenant) -> None:
    await put(api, tenant.key, "tiny", {"max_storage_gb": 9})  # a sandbox's disk is 10 GiB
    response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"external_user_id": "tiny"})
    assert_error(response, 409, "QUOTA_MAX_STORAGE_GB_EXCEEDED")
    await put(api, tenant.key, "tiny", {"max_credit_cents": 5})
    response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"external_user_id": "tiny", "size": "medium"})
    assert_error(response, 409, "QUOTA_MAX_CREDITS_EXCEEDED")
    assert (await api.request("GET", f"{API}/sandboxes", key=tenant.key)).json()["data"] == []


async def sandbox(api: Api, tenant: Tenant, external_user_id: str, **body: Any) -> Any:
    return await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"external_user_id": external_user_id, **body})


async def usage(api: Api, tenant: Tenant, external_user_id: str) -> dict[str, int]:
    response = await api.request("GET", quota_path(external_user_id), key=tenant.key)
    assert response.status_code == 200, response.text
    result: dict[str, int] = response.json()["data"]["usage"]
    return result


async def test_quota_hit_on_create_and_start_with_real_sandboxes(runtime_api: Api) -> None:
    api = runtime_api
    tenant = await api.create_tenant()
    await put(api, tenant.key, "carol", {"max_sandboxes": 2, "max_concurrent": 1})

    first = await sandbox(api, tenant, "carol", name="c1")
    assert first.status_code == 201, first.text
    first_id = first.json()["data"]["id"]
    assert await usage(api, tenant, "carol") == {"total_sandboxes": 1, "concurrent": 1, "storage_gb": 10, "credits_spent_cents": 0}

    error = assert_error(await sandbox(api, tenant, "carol", name="c2"), 409, "QUOTA_MAX_CONCURRENT_EXCEEDED")
    assert "carol" in error["message"]
    other_user = await sandbox(api, tenant, "dave", name="d1")  # someone else's quota is not carol's
    assert other_user.status_code == 201, other_user.text

    stopped = await api.request("POST", f"{API}/sandboxes/{first_id}/stop", key=tenant.key)
    assert stopped.status_code == 200, stopped.text
    assert await usage(api, tenant, "carol") == {"total_sandboxes": 1, "concurrent": 0, "storage_gb": 10, "credits_spent_cents": 0}
    second = await sandbox(api, tenant, "carol", name="c2")
    assert second.status_code == 201, second.text
    assert await usage(api, tenant, "carol") == {"total_sandboxes": 2, "concurrent": 1, "storage_gb": 20, "credits_spent_cents": 0}

    # Starting the stopped one would make two at once.
    assert_error(await api.request("POST", f"{API}/sandboxes/{first_id}/start", key=tenant.key), 409, "QUOTA_MAX_CONCURRENT_EXCEEDED")
    # A third would make three in total, even with room to run it.
    await put(api, tenant.key, "carol", {"max_sandboxes": 2, "max_concurrent": 5})
    assert_error(await sandbox(api, tenant, "carol", name="c3"), 409, "QUOTA_MAX_SANDBOXES_EXCEEDED")
    started = await api.request("POST", f"{API}/sandboxes/{first_id}/start", key=tenant.key)
    assert started.status_code == 200, started.text
    assert await usage(api, tenant, "carol") == {"total_sandboxes": 2, "concurrent": 2, "storage_gb": 20, "credits_spent_cents": 0}

    # Destroyed sandboxes no longer count; without a quota only the tenant plan governs.
    deleted = await api.request("DELETE", f"{API}/sandboxes/{first_id}", key=tenant.key)
    assert deleted.status_code == 200, deleted.text
    assert (await usage(api, tenant, "carol"))["total_sandboxes"] == 1
    assert (await api.request("DELETE", quota_path("carol"), key=tenant.key)).status_code == 204
    third = await sandbox(api, tenant, "carol", name="c3")
    assert third.status_code == 201, third.text
