"""Tenant branding (contract §16): the API, and its use by invite e-mails, pages and URLs."""

from __future__ import annotations

from typing import Any

from tests.http.people import call, new_person, outbox, owner_of
from tests.support import API, Api, Tenant, assert_error, member_key

EMPTY = {"display_name": None, "logo_url": None, "primary_color": None, "support_email": None, "custom_domain": None}
FULL = {
    "display_name": "Acme Cloud",
    "logo_url": "https://cdn.acme.example/logo.png",
    "primary_color": "#FF5500",
    "support_email": "help@acme.example",
    "custom_domain": "app.acme.example",
}


async def put(api: Api, key: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.request("PUT", f"{API}/tenant/branding", key=key, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_get_put_partial_and_clear(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    got = await api.request("GET", f"{API}/tenant/branding", key=tenant.key)
    assert got.status_code == 200 and got.json() == {"data": EMPTY}
    assert await put(api, tenant.key, FULL) == {**FULL, "primary_color": "#ff5500"}
    # Absent fields stay; null clears.
    assert await put(api, tenant.key, {"display_name": "Acme", "logo_url": None}) == {
        **FULL, "primary_color": "#ff5500", "display_name": "Acme", "logo_url": None
    }
    # A session works as well as a key (specification, authentication rule 6).
    owner = await owner_of(api, tenant)
    got = await call(api, owner, "GET", "/tenant/branding")
    assert got.status_code == 200 and got.json()["data"]["display_name"] == "Acme"
    # Another tenant sees its own (empty) branding; the domain is one tenant's only.
    assert (await api.request("GET", f"{API}/tenant/branding", key=other_tenant.key)).json() == {"data": EMPTY}
    taken = await api.request("PUT", f"{API}/tenant/branding", key=other_tenant.key, json={"custom_domain": "APP.acme.example"})
    assert_error(taken, 409, "DOMAIN_TAKEN")
    cleared = await put(api, tenant.key, {"custom_domain": None})
    assert cleared["custom_domain"] is None
    assert (await put(api, other_tenant.key, {"custom_domain": "app.acme.example"}))["custom_domain"] == "app.acme.example"


async def test_only_owners_and_admins_change_it(api: Api, tenant: Tenant) -> None:
    _, member = await member_key(api, tenant, "member")
    assert (await api.request("GET", f"{API}/tenant/branding", key=member)).status_code == 200
    assert_error(await api.request("PUT", f"{API}/tenant/branding", key=member, json={"display_name": "x"}), 403, "FORBIDDEN")
    _, admin = await member_key(api, tenant, "admin")
    assert (await put(api, admin, {"display_name": "By admin"}))["display_name"] == "By admin"
    assert_error(await api.request("GET", f"{API}/tenant/branding"), 401, "invalid_token")


async def test_validation(api: Api, tenant: Tenant) -> None:
    bad = {
        "primary_color": ["red", "#12345g", "#1234567", "#abc", 5],
        "logo_url": ["ftp://x.example/logo.png", "logo.png", "https://", "https://x.example/a b"],
        "support_email": ["nope", "a@b", "<x>@y.example"],
        "custom_domain": ["https://x.example", "*.x.example", "x.example/path", "localhost"],
        "display_name": ["x" * 101, ""],
    }
    for name, values in bad.items():
        for value in values:
            response = await api.request("PUT", f"{API}/tenant/branding", key=tenant.key, json={name: value})
            error = assert_error(response, 422, "VALIDATION_ERROR")
            assert name in error["details"], (name, value, error)
    assert (await put(api, tenant.key, {"display_name": "x" * 100}))["display_name"] == "x" * 100
    assert_error(await api.request("PUT", f"{API}/tenant/branding", key=tenant.key, content=b"[1]"), 400, "INVALID_BODY")
    assert (await api.request("GET", f"{API}/tenant/branding", key=tenant.key)).json()["data"]["primary_color"] is None


async def test_invites_use_the_branding(api: Api, tenant: Tenant) -> None:
    await put(api, tenant.key, FULL)
    owner = await owner_of(api, tenant)
    response = await call(api, owner, "POST", f"/tenants/{tenant.id}/invites", json={"email": "brand@example.test", "role": "member"})
    assert response.status_code == 201, response.text
    url = response.json()["data"]["invite_url"]
    assert url.startswith("https://app.acme.example/invites/")
    mail = (await outbox(api))[0]
    assert mail["subject"] == "You are invited to join Acme Cloud"
    assert "Acme Cloud" in mail["body"] and "help@acme.example" in mail["body"] and url in mail["body"]
    assert tenant.name not in mail["subject"]

    token = url.rsplit("/", 1)[1]
    page = await api.client.get(f"/invites/{token}")
    assert page.status_code == 200
    assert "<h1>Join Acme Cloud</h1>" in page.text
    assert 'src="https://cdn.acme.example/logo.png"' in page.text and "#ff5500" in page.text
    assert "mailto:help@acme.example" in page.text
    assert "img-src https: http:" in page.headers["Content-Security-Policy"]

    member = await new_person(api, tenant, "member")
    assert member.email  # a workspace invite to a new address mentions the display name too
    ws = await call(api, owner, "POST", f"/workspaces/{tenant.workspace_id}/invites", json={"email": "ws@example.test", "role": "member"})
    assert ws.status_code == 201, ws.text
    assert ws.json()["data"]["invite_url"].startswith("https://app.acme.example/workspace-invites/")
    assert "Acme Cloud" in (await outbox(api))[0]["subject"]


async def test_the_operator_custom_domain_is_the_branding_one(api: Api, tenant: Tenant) -> None:
    set_by_admin = await api.admin("PUT", f"{API}/admin/tenants/{tenant.id}/custom-domain", json={"custom_domain": "ops.example.org"})
    assert set_by_admin.status_code == 200, set_by_admin.text
    got = (await api.request("GET", f"{API}/tenant/branding", key=tenant.key)).json()["data"]
    assert got["custom_domain"] == "ops.example.org"
    await put(api, tenant.key, {"display_name": "Ops"})  # other fields leave it alone
    assert (await api.request("GET", f"{API}/tenant/branding", key=tenant.key)).json()["data"]["custom_domain"] == "ops.example.org"
