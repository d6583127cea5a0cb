"""Credits endpoints (unwrapped), the operator grant, and the 402 gate on sandboxes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from corral.actors import billing
from corral.storage import parse_iso, to_iso, utc_now
from tests.support import API, PASSWORD, Api, Tenant, assert_error, create_key


async def new_tenant(api: Api, credits: int | None) -> Tenant:
    """A tenant created with `credits` (None: the field omitted)."""
    body: dict[str, Any] = {"name": "Billed", "owner_email": f"b{utc_now().timestamp()}@x.test", "owner_password": PASSWORD}
    if credits is not None:
        body["credits"] = credits
    response = await api.admin("POST", f"{API}/admin/tenants", json=body)
    assert response.status_code == 201, response.text
    created = response.json()["data"]
    return Tenant(
        id=created["tenant"]["id"], name="Billed", owner_id=created["owner"]["id"], owner_email=body["owner_email"],
        workspace_id=created["workspace"]["id"], project_id=created["project"]["id"],
        key=created["api_key"]["key"], key_id=created["api_key"]["id"],
    )


async def get(api: Api, tenant: Tenant, path: str, **params: Any) -> Any:
    response = await api.request("GET", f"{API}{path}", key=tenant.key, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def grant(api: Api, tenant_id: str, amount: Any, description: Any = "top-up") -> Any:
    return await api.admin("POST", f"{API}/admin/tenants/{tenant_id}/credits", json={"amount_credits": amount, "description": description})


async def test_balance_is_zeros_and_nulls_without_a_record(api: Api) -> None:
    tenant = await new_tenant(api, 0)
    body = await get(api, tenant, "/credits/balance")
    assert body == {
        "tenant_id": tenant.id, "balance_credits": 0, "lifetime_earned": 0, "lifetime_spent": 0,
        "credit_expiry_at": None, "updated_at": None,
    }
    assert await get(api, tenant, "/credits/transactions") == {"transactions": [], "total": 0, "page": 1, "page_size": 20}


async def test_tenant_credits_are_granted_and_the_default_applies_when_omitted(api: Api) -> None:
    rich = await new_tenant(api, 250)
    body = await get(api, rich, "/credits/balance")
    assert (body["balance_credits"], body["lifetime_earned"], body["lifetime_spent"]) == (250, 250, 0)
    expiry = parse_iso(body["credit_expiry_at"])
    assert abs(expiry - (utc_now() + timedelta(days=180))) < timedelta(minutes=1)
    assert body["updated_at"] is not None
    [row] = (await get(api, rich, "/credits/transactions"))["transactions"]
    assert (row["type"], row["amount_credits"], row["description"]) == ("earn", 250, "initial credits")

    default = await new_tenant(api, None)
    assert (await get(api, default, "/credits/balance"))["balance_credits"] == api.platform.settings.default_tenant_credits


async def test_operator_grants_and_adjustments(api: Api) -> None:
    tenant = await new_tenant(api, 0)
    response = await grant(api, tenant.id, 40, "welcome")
    assert response.status_code == 201, response.text
    row = response.json()["data"]
    assert set(row) >= {
        "id", "tenant_id", "user_id", "computer_id", "type", "amount_credits", "description", "provider", "model",
        "input_tokens", "output_tokens", "cost_usd_micros", "inserted_at",
    }
    assert (row["type"], row["amount_credits"], row["tenant_id"], row["provider"], row["computer_id"]) == ("earn", 40, tenant.id, None, None)
    assert parse_iso(row["expires_at"]) - parse_iso(row["inserted_at"]) == timedelta(days=180)

    response = await grant(api, tenant.id, -15, "refund reversal")
    assert response.status_code == 201, response.text
    assert (response.json()["data"]["type"], response.json()["data"]["amount_credits"]) == ("adjust", -15)
    balance = await get(api, tenant, "/credits/balance")
    assert (balance["balance_credits"], balance["lifetime_earned"], balance["lifetime_spent"]) == (25, 40, 0)


async def test_grant_errors(api: Api, tenant: Tenant) -> None:
    for body, fields in (
        ({"amount_credits": 0, "description": "x"}, {"amount_credits"}),
        ({"amount_credits": 1.5, "description": "x"}, {"amount_credits"}),
        ({"amount_credits": "5", "description": "x"}, {"amount_credits"}),
        ({"amount_credits": True, "description": "x"}, {"amount_credits"}),
        ({"description": "x"}, {"amount_credits"}),
        ({"amount_credits": 5}, {"description"}),
        ({}, {"amount_credits", "description"}),
    ):
        response = await api.admin("POST", f"{API}/admin/tenants/{tenant.id}/credits", json=body)
        assert set(assert_error(response, 422, "VALIDATION_ERROR")["details"]) == fields, body
    assert_error(await grant(api, "00000000-0000-4000-8000-000000000000", 5), 404, "NOT_FOUND")
    assert_error(await grant(api, "not-a-uuid", 5), 400, "INVALID_ID")
    response = await api.request("POST", f"{API}/admin/tenants/{tenant.id}/credits", key=tenant.key, json={"amount_credits": 5, "description": "self-service"})
    assert_error(response, 403, "FORBIDDEN")
    response = await api.admin("POST", f"{API}/admin/tenants/{tenant.id}/credits", content=b"{nope")
    assert_error(response, 400, "INVALID_BODY")
    assert (await get(api, tenant, "/credits/balance"))["balance_credits"] == api.platform.settings.default_tenant_credits


async def test_transactions_are_paged_newest_first(api: Api) -> None:
    tenant = await new_tenant(api, 0)
    for amount in range(1, 26):
        assert (await grant(api, tenant.id, amount, f"grant {amount}")).status_code == 201
    first = await get(api, tenant, "/credits/transactions")
    assert (first["total"], first["page"], first["page_size"], len(first["transactions"])) == (25, 1, 20, 20)
    assert [t["amount_credits"] for t in first["transactions"]] == list(range(25, 5, -1))
    second = await get(api, tenant, "/credits/transactions", page=2)
    assert [t["amount_credits"] for t in second["transactions"]] == [5, 4, 3, 2, 1]
    small = await get(api, tenant, "/credits/transactions", page=3, page_size=10)
    assert [t["amount_credits"] for t in small["transactions"]] == [5, 4, 3, 2, 1]
    clamped = await get(api, tenant, "/credits/transactions", page_size=500)
    assert (clamped["page_size"], len(clamped["transactions"])) == (100, 25)
    past = await get(api, tenant, "/credits/transactions", page=9)
    assert (past["transactions"], past["total"]) == ([], 25)
    for params in ({"page": 0}, {"page": "x"}, {"page_size": 0}, {"page_size": "many"}):
        response = await api.request("GET", f"{API}/credits/transactions", key=tenant.key, params=params)
        assert_error(response, 400, "INVALID_PARAM")


async def test_usage_groups_by_day_provider_and_model(api: Api) -> None:
    tenant = await new_tenant(api, 500)
    for model, tokens in (("claude-haiku", 300_000), ("claude-haiku", 200_000), ("claude-opus", 100_000)):
        await billing.record_ai_usage(
            api.platform, tenant_id=tenant.id, provider="anthropic", model=model, input_tokens=tokens, output_tokens=50_000
        )
    body = await get(api, tenant, "/credits/usage")
    today = utc_now().strftime("%Y-%m-%d")
    assert body["usage"] == [
        {"day": today, "provider": "anthropic", "model": "claude-haiku", "credits_spent": 7, "input_tokens": 500_000,
         "output_tokens": 100_000, "cost_usd_micros": 70_000, "call_count": 2},
        {"day": today, "provider": "anthropic", "model": "claude-opus", "credits_spent": 11, "input_tokens": 100_000,
         "output_tokens": 50_000, "cost_usd_micros": 110_000, "call_count": 1},
    ]
    assert parse_iso(body["to"]) - parse_iso(body["from"]) == timedelta(days=30)

    # Explicit windows: one that ends before the rows, and one with an offset.
    earlier = await get(api, tenant, "/credits/usage", **{"from": to_iso(utc_now() - timedelta(days=3)), "to": to_iso(utc_now() - timedelta(days=1))})
    assert earlier["usage"] == []
    window = await get(api, tenant, "/credits/usage", **{"from": "2020-01-01T00:00:00+02:00", "to": "2099-01-01T00:00:00Z"})
    assert len(window["usage"]) == 2 and window["from"] == "2019-12-31T22:00:00.000000Z"
    other = await new_tenant(api, 5)
    assert (await get(api, other, "/credits/usage"))["usage"] == []


async def test_usage_parameter_errors(api: Api, tenant: Tenant) -> None:
    cases = (
        ({"from": "yesterday"}, "invalid 'from' timestamp"),
        ({"from": "2024-13-01T00:00:00Z"}, "invalid 'from' timestamp"),
        ({"from": "2024-01-01"}, "invalid 'from' timestamp"),
        ({"to": "soon"}, "invalid 'to' timestamp"),
        ({"from": "bad", "to": "bad"}, "invalid 'from' timestamp"),
        ({"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}, "'from' must be before 'to'"),
        ({"from": "2024-01-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}, "'from' must be before 'to'"),
        ({"from": to_iso(utc_now() + timedelta(days=1))}, "'from' must be before 'to'"),
    )
    for params, message in cases:
        response = await api.request("GET", f"{API}/credits/usage", key=tenant.key, params=params)
        assert assert_error(response, 400, "INVALID_PARAM")["message"] == message, params


async def test_credits_need_billing_read(api: Api, tenant: Tenant) -> None:
    narrow = await create_key(api, tenant.key, key_type="user", scopes=["sandboxes:read"])
    for path in ("/credits/balance", "/credits/transactions", "/credits/usage"):
        assert_error(await api.request("GET", f"{API}{path}", key=narrow["key"]), 403, "insufficient_scope")
    reader = await create_key(api, tenant.key, key_type="user", scopes=["billing:read"])
    assert (await api.request("GET", f"{API}/credits/balance", key=reader["key"])).status_code == 200
    assert_error(await api.request("GET", f"{API}/credits/balance"), 401, "invalid_token")


async def test_each_tenant_sees_only_its_own_ledger(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    await grant(api, tenant.id, 7, "only mine")
    mine = await get(api, tenant, "/credits/transactions")
    theirs = await get(api, other_tenant, "/credits/transactions")
    assert {t["tenant_id"] for t in mine["transactions"]} == {tenant.id}
    assert {t["tenant_id"] for t in theirs["transactions"]} == {other_tenant.id}
    assert "only mine" not in {t["description"] for t in theirs["transactions"]}


async def test_sandboxes_need_an_hour_of_credits(api: Api) -> None:
    """402 before anything is created: none at all, then less than an hour of `large`."""
    broke = await new_tenant(api, 0)
    response = await api.request("POST", f"{API}/sandboxes", key=broke.key, json={"name": "nope"})
    assert_error(response, 402, "INSUFFICIENT_CREDITS")
    await grant(api, broke.id, 11, "almost")
    response = await api.request("POST", f"{API}/sandboxes", key=broke.key, json={"size": "large"})
    assert "12" in assert_error(response, 402, "INSUFFICIENT_CREDITS")["message"]
    listed = await api.request("GET", f"{API}/sandboxes", key=broke.key)
    assert listed.json()["data"] == []
