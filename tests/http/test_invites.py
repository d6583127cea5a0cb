"""Workspace and org invites through the API: issue, list, revoke, look up, accept, e-mail,
white-label links and the product landing pages."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from corral.config import Settings
from corral.storage import parse_iso, to_iso, utc_now
from tests.http.people import (
    Person,
    add_member,
    call,
    login,
    new_person,
    new_workspace,
    outbox,
    owner_of,
)
from tests.support import API, Api, Tenant, assert_error, create_key, running_server

UNKNOWN_INVITE = "inv_01aaaaaaaaaaaaaaaaaaaaaaaa"


def token_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def invite_to_workspace(api: Api, who: Person | str, workspace_id: str, email: str, role: str = "member") -> dict[str, Any]:
    response = await call(api, who, "POST", f"/workspaces/{workspace_id}/invites", json={"email": email, "role": role})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["type"] == "invited"
    invite: dict[str, Any] = body["data"]
    return invite


async def invite_to_tenant(api: Api, who: Person, tenant_id: str, email: str, role: str = "member") -> dict[str, Any]:
    response = await call(api, who, "POST", f"/tenants/{tenant_id}/invites", json={"email": email, "role": role})
    assert response.status_code == 201, response.text
    invite: dict[str, Any] = response.json()["data"]
    return invite


async def expire(api: Api, invite_id: str) -> None:
    """Move an invite's expiry into the past, as seven days passing would."""
    past = to_iso(utc_now() - timedelta(seconds=1))
    await api.platform.db.execute("UPDATE invites SET expires_at = ? WHERE id = ?", (past, invite_id))


def within_seconds(moment: str, seconds: float, slack: float = 30) -> bool:
    expected = utc_now() + timedelta(seconds=seconds)
    return abs((parse_iso(moment) - expected).total_seconds()) < slack


# --- workspace invites -----------------------------------------------------------------


async def test_invite_a_colleague_who_accepts(api: Api, tenant: Tenant) -> None:
    """The walk-through: invite by e-mail, the colleague (a new user in no org) signs in and accepts."""
    owner = await owner_of(api, tenant)
    workspace = await new_workspace(api, owner, "Research")
    invite = await invite_to_workspace(api, owner, workspace["id"], "colleague@example.test", "member")

    assert set(invite) == {
        "id", "workspace_id", "tenant_id", "email", "role", "invited_by", "expires_at", "accepted_at", "inserted_at", "invite_url",
    }
    assert invite["id"].startswith("inv_") and len(invite["id"]) == 30
    assert (invite["workspace_id"], invite["tenant_id"], invite["email"], invite["role"], invite["invited_by"]) == (
        workspace["id"], tenant.id, "colleague@example.test", "member", owner.id,
    )
    assert invite["accepted_at"] is None
    assert within_seconds(invite["expires_at"], 7 * 24 * 3600)
    url = urlsplit(invite["invite_url"])
    assert (url.scheme, url.hostname, url.port) == ("http", "corral.localhost", api.platform.settings.port)
    assert url.path.startswith("/workspace-invites/")
    token = token_of(invite["invite_url"])
    assert len(token) >= 43

    mail = (await outbox(api))[0]
    assert mail["to"] == "colleague@example.test"
    assert "Research" in mail["subject"]
    assert invite["invite_url"] in mail["body"]

    pending = (await call(api, owner, "GET", f"/workspaces/{workspace['id']}/invites")).json()["data"]
    assert [p["id"] for p in pending] == [invite["id"]]
    assert "invite_url" not in pending[0]

    # Only the token's digest is stored.
    rows = await api.platform.db.fetch_all("SELECT * FROM invites")
    assert not any(token in str(value) for row in rows for value in row.values())
    assert rows[0]["token_digest"] == hashlib.sha256(token.encode()).hexdigest()

    lookup = await api.client.get(f"{API}/workspace-invites/{token}")  # public
    assert lookup.status_code == 200, lookup.text
    assert lookup.json() == {
        "data": {"workspace_name": "Research", "role": "member", "expires_at": invite["expires_at"], "expired": False, "accepted": False}
    }

    colleague = await new_person(api, email="colleague@example.test")  # in no org yet
    accepted = await call(api, colleague, "POST", f"/workspace-invites/{token}/accept")
    assert accepted.status_code == 200, accepted.text
    assert accepted.json() == {"accepted": True, "workspace_id": workspace["id"], "tenant_id": tenant.id, "role": "member"}

    session = await login(api, colleague.email)
    assert session["tenant_id"] == tenant.id
    as_member = Person(colleague.id, colleague.email, session["token"])
    assert (await call(api, as_member, "GET", "/tenant")).json()["data"]["role"] == "member"
    visible = (await call(api, as_member, "GET", "/workspaces")).json()["data"]
    assert [(w["id"], w["role"]) for w in visible] == [(workspace["id"], "member")]  # not the default workspace
    members = (await call(api, owner, "GET", f"/workspaces/{workspace['id']}/members")).json()["data"]
    joined = next(m for m in members if m["user_id"] == colleague.id)
    assert (joined["role"], joined["added_by"], joined["email"]) == ("member", owner.id, "colleague@example.test")

    after = (await api.client.get(f"{API}/workspace-invites/{token}")).json()["data"]
    assert after["accepted"] is True and after["expired"] is False
    assert (await call(api, owner, "GET", f"/workspaces/{workspace['id']}/invites")).json()["data"] == []
    assert_error(await call(api, as_member, "POST", f"/workspace-invites/{token}/accept"), 409, "ALREADY_ACCEPTED")
    revoke = await call(api, owner, "DELETE", f"/workspaces/{workspace['id']}/invites/{invite['id']}")
    assert_error(revoke, 409, "ALREADY_ACCEPTED")


async def test_a_session_without_org_moves_into_it_on_refresh(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "fresh@example.test")
    session = await login(api, (await new_person(api, email="fresh@example.test")).email)
    assert session["tenant_id"] is None
    token = token_of(invite["invite_url"])
    accepted = await api.request("POST", f"{API}/workspace-invites/{token}/accept", key=session["token"])
    assert accepted.status_code == 200, accepted.text
    refreshed = await api.client.post(f"{API}/auth/refresh", json={"refresh_token": session["refresh_token"]})
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["tenant_id"] == tenant.id


async def test_accept_compares_email_case_insensitively(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "Mixed.Case@Example.TEST", "viewer")
    assert invite["email"] == "Mixed.Case@Example.TEST"
    invitee = await new_person(api, email="mixed.case@example.test")
    response = await call(api, invitee, "POST", f"/workspace-invites/{token_of(invite['invite_url'])}/accept")
    assert response.status_code == 200, response.text
    assert response.json()["role"] == "viewer"


async def test_accept_needs_the_invited_user(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "someone@example.test")
    path = f"/workspace-invites/{token_of(invite['invite_url'])}/accept"
    somebody_else = await new_person(api, email="someone.else@example.test")
    error = assert_error(await call(api, somebody_else, "POST", path), 422, "EMAIL_MISMATCH")
    assert "e-mail" in error["message"]
    assert_error(await call(api, other_tenant.key, "POST", path), 422, "EMAIL_MISMATCH")  # another org's owner key
    keyless = await api.admin(
        "POST", f"{API}/admin/api-keys", json={"tenant_id": other_tenant.id, "name": "bot", "key_type": "platform"}
    )
    assert_error(await call(api, keyless.json()["data"]["key"], "POST", path), 403, "FORBIDDEN")
    assert_error(await api.client.post(f"{API}{path}"), 401, "invalid_token")
    # Nothing was joined by the refused attempts.
    assert_error(await call(api, somebody_else, "GET", "/tenant"), 422, "TENANT_RESOLUTION_FAILED")
    assert (await api.client.get(f"{API}/workspace-invites/{token_of(invite['invite_url'])}")).json()["data"]["accepted"] is False


async def test_a_member_of_another_org_joins_this_one_too(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    elsewhere = await new_person(api, other_tenant, "admin")
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, elsewhere.email, "admin")
    accepted = await call(api, elsewhere, "POST", f"/workspace-invites/{token_of(invite['invite_url'])}/accept")
    assert accepted.status_code == 200, accepted.text
    here = await login(api, elsewhere.email, tenant.id)
    assert here["tenant_id"] == tenant.id
    me = (await api.request("GET", f"{API}/tenant", key=here["token"])).json()["data"]
    assert me["role"] == "member"  # the org role of a workspace invitee
    workspace = (await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=here["token"])).json()["data"]
    assert workspace["role"] == "admin"
    there = await call(api, elsewhere, "GET", "/tenant")
    assert there.json()["data"]["id"] == other_tenant.id and there.json()["data"]["role"] == "admin"


async def test_inviting_a_member_of_the_org_adds_them(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    workspace = await new_workspace(api, owner, "Side project")
    colleague = await new_person(api, tenant)
    mails_before = len(await outbox(api))
    response = await call(
        api, owner, "POST", f"/workspaces/{workspace['id']}/invites", json={"email": colleague.email.upper(), "role": "admin"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["type"] == "added"
    assert set(body["data"]) == {"user_id", "workspace_id", "role", "joined_at", "added_by"}
    assert (body["data"]["user_id"], body["data"]["role"], body["data"]["added_by"]) == (colleague.id, "admin", owner.id)
    assert len(await outbox(api)) == mails_before  # no e-mail
    assert (await call(api, owner, "GET", f"/workspaces/{workspace['id']}/invites")).json()["data"] == []
    again = await call(api, owner, "POST", f"/workspaces/{workspace['id']}/invites", json={"email": colleague.email, "role": "viewer"})
    assert_error(again, 409, "ALREADY_MEMBER")


async def test_workspace_invite_validation(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    path = f"/workspaces/{tenant.workspace_id}/invites"
    for body, code in (
        ({}, "MISSING_EMAIL"),
        ({"role": "member"}, "MISSING_EMAIL"),
        ({"email": "", "role": "member"}, "MISSING_EMAIL"),
        ({"email": "a@example.test"}, "MISSING_ROLE"),
        ({"email": "not-an-address"}, "MISSING_ROLE"),  # presence before format
    ):
        assert_error(await call(api, owner, "POST", path, json=body), 422, code)
    for body, field in (
        ({"email": "not-an-address", "role": "member"}, "email"),
        ({"email": "a b@example.test", "role": "member"}, "email"),
        ({"email": "a@localhost", "role": "member"}, "email"),
        ({"email": ["a@example.test"], "role": "member"}, "email"),
        ({"email": "a@example.test", "role": "boss"}, "role"),
    ):
        error = assert_error(await call(api, owner, "POST", path, json=body), 422, "VALIDATION_ERROR")
        assert field in error["details"], body
    assert (await call(api, owner, "GET", path)).json()["data"] == []


async def test_workspace_invite_roles(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    workspace = await new_workspace(api, owner, "Guarded")
    path = f"/workspaces/{workspace['id']}/invites"
    admin, member, viewer, outsider = [await new_person(api, tenant) for _ in range(4)]
    for person, role in ((admin, "admin"), (member, "member"), (viewer, "viewer")):
        await add_member(api, owner, workspace["id"], person.id, role)
    for who in (member, viewer):
        assert_error(await call(api, who, "POST", path, json={"email": "x@example.test", "role": "viewer"}), 403, "FORBIDDEN")
        assert_error(await call(api, who, "GET", path), 403, "FORBIDDEN")
    assert_error(await call(api, outsider, "GET", path), 404, "NOT_FOUND")
    assert_error(await call(api, admin, "POST", path, json={"email": "boss@example.test", "role": "owner"}), 403, "FORBIDDEN")
    by_admin = await invite_to_workspace(api, admin, workspace["id"], "helper@example.test", "admin")
    by_owner = await invite_to_workspace(api, owner, workspace["id"], "boss@example.test", "owner")
    assert_error(await call(api, member, "DELETE", f"{path}/{by_admin['id']}"), 403, "FORBIDDEN")
    assert_error(await call(api, admin, "DELETE", f"{path}/{by_owner['id']}"), 403, "FORBIDDEN")
    listed = (await call(api, admin, "GET", path)).json()["data"]
    assert [i["id"] for i in listed] == [by_admin["id"], by_owner["id"]]
    revoked = await call(api, admin, "DELETE", f"{path}/{by_admin['id']}")
    assert revoked.status_code == 200 and revoked.json() == {"invite_id": by_admin["id"], "revoked": True}


async def test_revoked_and_unknown_tokens(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "maybe@example.test")
    token = token_of(invite["invite_url"])
    invitee = await new_person(api, email="maybe@example.test")
    path = f"/workspaces/{tenant.workspace_id}/invites/{invite['id']}"
    revoked = await call(api, owner, "DELETE", path)
    assert revoked.status_code == 200 and revoked.json() == {"invite_id": invite["id"], "revoked": True}
    again = await call(api, owner, "DELETE", path)  # idempotent
    assert again.status_code == 200 and again.json() == {"invite_id": invite["id"], "revoked": True}
    assert_error(await api.client.get(f"{API}/workspace-invites/{token}"), 400, "REVOKED")
    assert_error(await call(api, invitee, "POST", f"/workspace-invites/{token}/accept"), 400, "REVOKED")
    assert (await call(api, owner, "GET", f"/workspaces/{tenant.workspace_id}/invites")).json()["data"] == []

    for bad in ("nope", "x" * 300, token[:-1]):
        assert_error(await api.client.get(f"{API}/workspace-invites/{bad}"), 400, "INVALID_TOKEN")
        assert_error(await call(api, invitee, "POST", f"/workspace-invites/{bad}/accept"), 400, "INVALID_TOKEN")
    assert_error(await call(api, owner, "DELETE", f"/workspaces/{tenant.workspace_id}/invites/{UNKNOWN_INVITE}"), 404, "NOT_FOUND")
    assert_error(await call(api, owner, "DELETE", f"/workspaces/{tenant.workspace_id}/invites/12"), 400, "INVALID_ID")
    org_invite = await invite_to_tenant(api, owner, tenant.id, "org@example.test")
    # An org invite's token is not a workspace invite token, nor its id a workspace invite id.
    assert_error(await api.client.get(f"{API}/workspace-invites/{token_of(org_invite['invite_url'])}"), 400, "INVALID_TOKEN")
    assert_error(
        await call(api, owner, "DELETE", f"/workspaces/{tenant.workspace_id}/invites/{org_invite['invite_id']}"), 404, "NOT_FOUND"
    )


async def test_expired_invites(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "late@example.test", "viewer")
    token = token_of(invite["invite_url"])
    await expire(api, invite["id"])
    lookup = await api.client.get(f"{API}/workspace-invites/{token}")
    assert lookup.status_code == 200 and lookup.json()["data"]["expired"] is True
    late = await new_person(api, email="late@example.test")
    assert_error(await call(api, late, "POST", f"/workspace-invites/{token}/accept"), 400, "INVALID_TOKEN")
    assert (await call(api, owner, "GET", f"/workspaces/{tenant.workspace_id}/invites")).json()["data"] == []
    renewed = await invite_to_workspace(api, owner, tenant.workspace_id, "late@example.test", "viewer")
    accepted = await call(api, late, "POST", f"/workspace-invites/{token_of(renewed['invite_url'])}/accept")
    assert accepted.status_code == 200, accepted.text


async def test_a_new_invite_supersedes_the_pending_one(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    first = await invite_to_workspace(api, owner, tenant.workspace_id, "twice@example.test", "viewer")
    second = await invite_to_workspace(api, owner, tenant.workspace_id, "TWICE@example.test", "member")
    assert first["id"] != second["id"]
    listed = (await call(api, owner, "GET", f"/workspaces/{tenant.workspace_id}/invites")).json()["data"]
    assert [(i["id"], i["role"]) for i in listed] == [(second["id"], "member")]
    assert_error(await api.client.get(f"{API}/workspace-invites/{token_of(first['invite_url'])}"), 400, "REVOKED")
    assert len([m for m in await outbox(api) if m["to"].lower() == "twice@example.test"]) == 2


async def test_invite_ttl_is_a_setting(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_INVITE_TTL_SECONDS", "3600")
    assert Settings.from_env().invite_ttl_seconds == 3600
    monkeypatch.delenv("CORRAL_INVITE_TTL_SECONDS")
    assert Settings.from_env().invite_ttl_seconds == 7 * 24 * 3600
    async with running_server(tmp_path_factory.mktemp("ttl"), invite_ttl_seconds=120) as api:
        tenant = await api.create_tenant()
        owner = await owner_of(api, tenant)
        invite = await invite_to_workspace(api, owner, tenant.workspace_id, "soon@example.test")
        assert within_seconds(invite["expires_at"], 120, slack=10)
        org = await invite_to_tenant(api, owner, tenant.id, "soon.org@example.test")
        assert within_seconds(org["expires_at"], 120, slack=10)


# --- org invites -----------------------------------------------------------------------


async def test_org_invite_flow(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_tenant(api, owner, tenant.id, "New.Admin@example.test", "admin")
    assert set(invite) == {"invite_id", "email", "role", "expires_at", "invite_url"}
    assert invite["invite_id"].startswith("inv_")
    assert (invite["email"], invite["role"]) == ("New.Admin@example.test", "admin")
    assert within_seconds(invite["expires_at"], 7 * 24 * 3600)
    url = urlsplit(invite["invite_url"])
    assert (url.hostname, url.path.rsplit("/", 1)[0]) == ("corral.localhost", "/invites")
    token = token_of(invite["invite_url"])
    mail = (await outbox(api))[0]
    assert mail["to"] == "New.Admin@example.test" and invite["invite_url"] in mail["body"] and tenant.name in mail["subject"]

    listed = await call(api, owner, "GET", f"/tenants/{tenant.id}/invites")
    assert listed.status_code == 200, listed.text
    assert [(i["invite_id"], i["email"], i["role"], i["invited_by"]) for i in listed.json()["data"]] == [
        (invite["invite_id"], "New.Admin@example.test", "admin", owner.id)
    ]
    lookup = await api.client.get(f"{API}/invites/{token}")
    assert lookup.status_code == 200
    assert lookup.json() == {
        "data": {
            "email": "New.Admin@example.test", "tenant_name": tenant.name, "role": "admin",
            "expires_at": invite["expires_at"], "expired": False, "accepted": False,
        }
    }

    newcomer = await new_person(api, email="new.admin@example.test")
    accepted = await call(api, newcomer, "POST", f"/invites/{token}/accept")
    assert accepted.status_code == 200, accepted.text
    assert accepted.json() == {"accepted": True, "tenant_id": tenant.id, "tenant": {"id": tenant.id, "name": tenant.name}}
    session = await login(api, newcomer.email)
    assert session["tenant_id"] == tenant.id
    me = (await api.request("GET", f"{API}/tenant", key=session["token"])).json()["data"]
    assert me["role"] == "admin"
    default = (await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=session["token"])).json()["data"]
    assert default["role"] == "admin"
    members = (await call(api, owner, "GET", f"/workspaces/{tenant.workspace_id}/members")).json()["data"]
    assert {m["user_id"]: m["role"] for m in members}[newcomer.id] == "admin"

    assert (await api.client.get(f"{API}/invites/{token}")).json()["data"]["accepted"] is True
    assert (await call(api, owner, "GET", f"/tenants/{tenant.id}/invites")).json()["data"] == []
    assert_error(await call(api, owner, "DELETE", f"/tenants/{tenant.id}/invites/{invite['invite_id']}"), 409, "ALREADY_ACCEPTED")
    assert_error(await call(api, newcomer, "POST", f"/invites/{token}/accept"), 409, "ALREADY_ACCEPTED")


async def test_org_invites_need_an_admin_session(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    path = f"/tenants/{tenant.id}/invites"
    body = {"email": "someone@example.test", "role": "member"}
    # Tenant administration takes a JWT session (specification, Authentication rule 6).
    error = assert_error(await call(api, tenant.key, "POST", path, json=body), 403, "FORBIDDEN")
    assert "JWT" in error["message"]
    assert_error(await call(api, tenant.key, "GET", path), 403, "FORBIDDEN")
    member = await new_person(api, tenant, "member")
    assert_error(await call(api, member, "POST", path, json=body), 403, "FORBIDDEN")
    assert_error(await call(api, member, "GET", path), 403, "FORBIDDEN")
    admin = await new_person(api, tenant, "admin")
    made = await invite_to_tenant(api, admin, tenant.id, "by.admin@example.test", "admin")
    assert_error(await call(api, admin, "POST", path, json={"email": "boss@example.test", "role": "owner"}), 403, "FORBIDDEN")
    by_owner = await invite_to_tenant(api, owner, tenant.id, "boss@example.test", "owner")
    assert_error(await call(api, admin, "DELETE", f"{path}/{by_owner['invite_id']}"), 403, "FORBIDDEN")
    assert_error(await call(api, member, "DELETE", f"{path}/{made['invite_id']}"), 403, "FORBIDDEN")
    stranger = await owner_of(api, other_tenant)
    assert_error(await call(api, stranger, "GET", path), 404, "NOT_FOUND")
    assert_error(await call(api, stranger, "DELETE", f"{path}/{made['invite_id']}"), 404, "NOT_FOUND")
    assert_error(await call(api, owner, "GET", f"/tenants/{other_tenant.id}/invites"), 404, "NOT_FOUND")
    assert_error(await call(api, owner, "GET", "/tenants/acme/invites"), 400, "INVALID_ID")
    listed = (await call(api, admin, "GET", path)).json()["data"]
    assert [i["invite_id"] for i in listed] == [made["invite_id"], by_owner["invite_id"]]


async def test_org_invite_errors(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    path = f"/tenants/{tenant.id}/invites"
    assert_error(await call(api, owner, "POST", path, json={"role": "member"}), 422, "MISSING_EMAIL")
    assert_error(await call(api, owner, "POST", path, json={"email": "x@example.test"}), 422, "MISSING_ROLE")
    error = assert_error(await call(api, owner, "POST", path, json={"email": "x@example.test", "role": "viewer"}), 422, "VALIDATION_ERROR")
    assert "role" in error["details"]
    existing = await new_person(api, tenant)
    assert_error(await call(api, owner, "POST", path, json={"email": existing.email.upper(), "role": "admin"}), 409, "ALREADY_MEMBER")
    assert_error(await call(api, owner, "POST", path, json={"email": tenant.owner_email, "role": "member"}), 409, "ALREADY_MEMBER")

    invite = await invite_to_tenant(api, owner, tenant.id, "gone@example.test")
    token = token_of(invite["invite_url"])
    revoked = await call(api, owner, "DELETE", f"{path}/{invite['invite_id']}")
    assert revoked.status_code == 200 and revoked.json() == {"invite_id": invite["invite_id"], "revoked": True}
    assert_error(await api.client.get(f"{API}/invites/{token}"), 400, "REVOKED")
    gone = await new_person(api, email="gone@example.test")
    assert_error(await call(api, gone, "POST", f"/invites/{token}/accept"), 400, "REVOKED")
    assert_error(await call(api, owner, "DELETE", f"{path}/{UNKNOWN_INVITE}"), 404, "NOT_FOUND")
    assert_error(await call(api, owner, "DELETE", f"{path}/not-an-invite"), 400, "INVALID_ID")
    assert_error(await api.client.get(f"{API}/invites/unknown-token"), 400, "INVALID_TOKEN")
    assert_error(await call(api, gone, "POST", "/invites/unknown-token/accept"), 400, "INVALID_TOKEN")

    late = await invite_to_tenant(api, owner, tenant.id, "gone@example.test")
    await expire(api, late["invite_id"])
    assert (await api.client.get(f"{API}/invites/{token_of(late['invite_url'])}")).json()["data"]["expired"] is True
    assert_error(await call(api, gone, "POST", f"/invites/{token_of(late['invite_url'])}/accept"), 400, "INVALID_TOKEN")
    other = await invite_to_tenant(api, owner, tenant.id, "someone.specific@example.test")
    assert_error(await call(api, gone, "POST", f"/invites/{token_of(other['invite_url'])}/accept"), 422, "EMAIL_MISMATCH")
    assert_error(await call(api, gone, "GET", "/tenant"), 422, "TENANT_RESOLUTION_FAILED")  # joined nothing


async def test_invites_are_audited_in_the_inviting_tenant(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_tenant(api, owner, tenant.id, "audited@example.test")
    newcomer = await new_person(api, email="audited@example.test")
    await call(api, newcomer, "POST", f"/invites/{token_of(invite['invite_url'])}/accept")
    log = (await api.request("GET", f"{API}/audit-log", key=tenant.key)).json()["data"]
    found = [(e["action"], e["resource_id"], e["actor"]["user_id"], e["outcome"]) for e in log if e["resource_type"] == "invite"]
    assert found == [
        ("tenant_invites.accept", invite["invite_id"], newcomer.id, "success"),
        ("tenant_invites.create", invite["invite_id"], owner.id, "success"),
    ]


# --- white label -----------------------------------------------------------------------


async def test_white_label_tenants_get_links_on_their_domain(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    path = f"{API}/admin/tenants/{tenant.id}/custom-domain"
    response = await api.admin("PUT", path, json={"custom_domain": "Team.Acme.test."})
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"id": tenant.id, "name": tenant.name, "created_at": response.json()["data"]["created_at"], "custom_domain": "team.acme.test"}

    org = await invite_to_tenant(api, owner, tenant.id, "white@example.test")
    assert org["invite_url"].startswith("https://team.acme.test/invites/")
    workspace = await invite_to_workspace(api, owner, tenant.workspace_id, "label@example.test")
    assert workspace["invite_url"].startswith("https://team.acme.test/workspace-invites/")
    assert "https://team.acme.test/invites/" in (await outbox(api))[1]["body"]
    other_owner = await owner_of(api, other_tenant)
    elsewhere = await invite_to_tenant(api, other_owner, other_tenant.id, "plain@example.test")
    assert urlsplit(elsewhere["invite_url"]).hostname == "corral.localhost"

    taken = await api.admin("PUT", f"{API}/admin/tenants/{other_tenant.id}/custom-domain", json={"custom_domain": "team.acme.test"})
    assert_error(taken, 409, "DOMAIN_TAKEN")
    for bad in ("https://acme.test", "acme", "*.acme.test", "acme.test/invites", "acme.test:8443", "-x.acme.test", "x.corral.localhost", "a" * 250 + ".test", "", 7):
        error = assert_error(await api.admin("PUT", path, json={"custom_domain": bad}), 422, "VALIDATION_ERROR")
        assert "custom_domain" in error["details"], bad
    assert_error(await api.admin("PUT", path, json={}), 422, "VALIDATION_ERROR")
    assert_error(await api.request("PUT", path, key=tenant.key, json={"custom_domain": "x.acme.test"}), 403, "FORBIDDEN")
    assert_error(await api.admin("PUT", f"{API}/admin/tenants/00000000-0000-4000-8000-000000000000/custom-domain", json={"custom_domain": "y.acme.test"}), 404, "NOT_FOUND")

    cleared = await api.admin("PUT", path, json={"custom_domain": None})
    assert cleared.status_code == 200 and cleared.json()["data"]["custom_domain"] is None
    plain = await invite_to_tenant(api, owner, tenant.id, "after@example.test")
    assert urlsplit(plain["invite_url"]).hostname == "corral.localhost"


async def test_public_domain_links_use_https(tmp_path_factory: pytest.TempPathFactory) -> None:
    async with running_server(tmp_path_factory.mktemp("public"), public_domain="corral.example.com") as api:
        tenant = await api.create_tenant()
        invite = await invite_to_tenant(api, await owner_of(api, tenant), tenant.id, "x@example.test")
        assert invite["invite_url"].startswith("https://corral.example.com/invites/")


# --- the product's landing pages ---------------------------------------------------------


async def test_landing_pages(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    await api.platform.db.execute("UPDATE tenants SET name = ? WHERE id = ?", ("Acme <b>&</b> Co", tenant.id))
    org = await invite_to_tenant(api, owner, tenant.id, "page@example.test", "admin")
    token = token_of(org["invite_url"])
    page = await api.client.get(urlsplit(org["invite_url"]).path)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "Acme &lt;b&gt;&amp;&lt;/b&gt; Co" in page.text and "<b>" not in page.text
    assert "page@example.test" in page.text and f"/api/v1/invites/{token}/accept" in page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert "script-src 'nonce-" in page.headers["content-security-policy"]

    legacy = await api.client.get(f"/invite/{token}")
    assert legacy.status_code == 301 and legacy.headers["location"] == f"/invites/{token}"

    workspace = await invite_to_workspace(api, owner, tenant.workspace_id, "ws.page@example.test")
    ws_page = await api.client.get(urlsplit(workspace["invite_url"]).path)
    assert ws_page.status_code == 200 and "the Default workspace of Acme" in ws_page.text

    missing = await api.client.get("/invites/not-a-token")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert (await api.client.get(f"/workspace-invites/{token}")).status_code == 404  # an org token
    await call(api, owner, "DELETE", f"/tenants/{tenant.id}/invites/{org['invite_id']}")
    assert (await api.client.get(f"/invites/{token}")).status_code == 410
    await expire(api, workspace["id"])
    assert (await api.client.get(urlsplit(workspace["invite_url"]).path)).status_code == 410


async def test_other_tenants_cannot_touch_invites(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    invite = await invite_to_workspace(api, owner, tenant.workspace_id, "private@example.test")
    stranger = await owner_of(api, other_tenant)
    base = f"/workspaces/{tenant.workspace_id}/invites"
    assert_error(await call(api, stranger, "GET", base), 404, "NOT_FOUND")
    assert_error(await call(api, stranger, "POST", base, json={"email": "x@example.test", "role": "member"}), 404, "NOT_FOUND")
    assert_error(await call(api, stranger, "DELETE", f"{base}/{invite['id']}"), 404, "NOT_FOUND")
    stranger_key = (await create_key(api, other_tenant.key, name="k", key_type="user"))["key"]
    assert_error(await call(api, stranger_key, "DELETE", f"{base}/{invite['id']}"), 404, "NOT_FOUND")
    assert [i["id"] for i in (await call(api, owner, "GET", base)).json()["data"]] == [invite["id"]]
