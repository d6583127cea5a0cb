"""Workspace members: list, add, change role, remove, role rules and LAST_OWNER, through the API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.http.people import Person, add_member, call, new_person, new_workspace, owner_of
from tests.support import API, Api, Tenant, assert_error, create_key

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


@dataclass
class Team:
    """A workspace owned by the tenant owner, with an admin, a member and a viewer (all
    plain tenant members, so that only their workspace role counts)."""

    workspace: dict[str, Any]
    owner: Person
    admin: Person
    member: Person
    viewer: Person
    outsider: Person
    """A tenant member who is not in the workspace."""

    @property
    def path(self) -> str:
        return f"/workspaces/{self.workspace['id']}/members"


@pytest.fixture
async def team(api: Api, tenant: Tenant) -> Team:
    owner = await owner_of(api, tenant)
    workspace = await new_workspace(api, owner, "Team")
    people = [await new_person(api, tenant) for _ in range(4)]
    for person, role in zip(people, ("admin", "member", "viewer"), strict=False):
        await add_member(api, owner, workspace["id"], person.id, role)
    return Team(workspace, owner, *people)


async def roles(api: Api, team: Team) -> dict[str, str]:
    response = await call(api, team.owner, "GET", team.path)
    assert response.status_code == 200, response.text
    return {m["user_id"]: m["role"] for m in response.json()["data"]}


# --- list and add ----------------------------------------------------------------------


async def test_member_list_shape(api: Api, team: Team) -> None:
    response = await call(api, team.viewer, "GET", team.path)  # viewers read
    assert response.status_code == 200, response.text
    members = response.json()["data"]
    assert [m["user_id"] for m in members] == [team.owner.id, team.admin.id, team.member.id, team.viewer.id]
    first = members[0]
    assert set(first) == {"user_id", "email", "name", "avatar_url", "role", "joined_at", "added_by"}
    # The creator of a workspace is its first owner, added by themselves.
    assert (first["email"], first["role"], first["avatar_url"], first["added_by"]) == (team.owner.email, "owner", None, team.owner.id)
    admin = members[1]
    assert (admin["email"], admin["name"], admin["role"], admin["added_by"]) == (
        team.admin.email,
        team.admin.email.split("@")[0],
        "admin",
        team.owner.id,
    )
    assert admin["joined_at"].endswith("Z")


async def test_add_member(api: Api, team: Team) -> None:
    response = await call(api, team.admin, "POST", team.path, json={"user_id": team.outsider.id, "role": "member"})
    assert response.status_code == 201, response.text
    added = response.json()["data"]
    assert set(added) == {"user_id", "workspace_id", "role", "joined_at", "added_by"}
    assert (added["user_id"], added["workspace_id"], added["role"], added["added_by"]) == (
        team.outsider.id,
        team.workspace["id"],
        "member",
        team.admin.id,
    )
    assert (await roles(api, team))[team.outsider.id] == "member"
    seen = await call(api, team.outsider, "GET", f"/workspaces/{team.workspace['id']}")
    assert seen.status_code == 200 and seen.json()["data"]["role"] == "member"

    again = await call(api, team.admin, "POST", team.path, json={"user_id": team.outsider.id, "role": "viewer"})
    assert_error(again, 409, "ALREADY_MEMBER")
    assert (await roles(api, team))[team.outsider.id] == "member"


async def test_add_needs_a_tenant_member(api: Api, team: Team, other_tenant: Tenant) -> None:
    loner = await new_person(api)  # in no tenant
    stranger = await new_person(api, other_tenant)
    for user_id in (loner.id, stranger.id, UNKNOWN_ID):
        response = await call(api, team.owner, "POST", team.path, json={"user_id": user_id, "role": "member"})
        error = assert_error(response, 422, "NOT_TENANT_MEMBER")
        assert "organization" in error["message"]
    assert set(await roles(api, team)) == {team.owner.id, team.admin.id, team.member.id, team.viewer.id}


async def test_add_validation(api: Api, team: Team) -> None:
    user_id = team.outsider.id
    for body, code in (
        ({}, "MISSING_USER_ID"),
        ({"role": "member"}, "MISSING_USER_ID"),
        ({"user_id": "  ", "role": "member"}, "MISSING_USER_ID"),
        ({"user_id": user_id}, "MISSING_ROLE"),
        ({"user_id": user_id, "role": None}, "MISSING_ROLE"),
        ({"user_id": "not-a-uuid"}, "MISSING_ROLE"),  # presence before format
    ):
        error = assert_error(await call(api, team.owner, "POST", team.path, json=body), 422, code)
        assert error["message"].endswith("is required"), error
    for body, field in (
        ({"user_id": user_id, "role": "superuser"}, "role"),
        ({"user_id": "not-a-uuid", "role": "member"}, "user_id"),
        ({"user_id": 42, "role": "member"}, "user_id"),
    ):
        error = assert_error(await call(api, team.owner, "POST", team.path, json=body), 422, "VALIDATION_ERROR")
        assert field in error["details"], body
    assert_error(await call(api, team.owner, "POST", team.path, content=b"{nope"), 400, "INVALID_BODY")
    assert team.outsider.id not in await roles(api, team)


# --- role checks -----------------------------------------------------------------------


async def test_viewers_and_members_cannot_manage_members(api: Api, team: Team) -> None:
    for who in (team.viewer, team.member):
        assert (await call(api, who, "GET", team.path)).status_code == 200
        assert_error(
            await call(api, who, "POST", team.path, json={"user_id": team.outsider.id, "role": "viewer"}), 403, "FORBIDDEN"
        )
        assert_error(await call(api, who, "PATCH", f"{team.path}/{team.admin.id}", json={"role": "viewer"}), 403, "FORBIDDEN")
        assert_error(await call(api, who, "DELETE", f"{team.path}/{team.admin.id}"), 403, "FORBIDDEN")
    outside = await call(api, team.outsider, "GET", team.path)  # not in the workspace: it does not exist for them
    assert_error(outside, 404, "NOT_FOUND")
    assert (await roles(api, team))[team.admin.id] == "admin"


async def test_admins_manage_members_but_not_owners(api: Api, team: Team) -> None:
    admin, path = team.admin, team.path
    changed = await call(api, admin, "PATCH", f"{path}/{team.member.id}", json={"role": "viewer"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["data"]["role"] == "viewer"
    assert_error(await call(api, admin, "POST", path, json={"user_id": team.outsider.id, "role": "owner"}), 403, "FORBIDDEN")
    assert_error(await call(api, admin, "PATCH", f"{path}/{team.member.id}", json={"role": "owner"}), 403, "FORBIDDEN")
    assert_error(await call(api, admin, "PATCH", f"{path}/{team.owner.id}", json={"role": "admin"}), 403, "FORBIDDEN")
    assert_error(await call(api, admin, "DELETE", f"{path}/{team.owner.id}"), 403, "FORBIDDEN")
    removed = await call(api, admin, "DELETE", f"{path}/{team.viewer.id}")
    assert removed.status_code == 200 and removed.json() == {"deleted": True}
    assert (await roles(api, team)) == {team.owner.id: "owner", team.admin.id: "admin", team.member.id: "viewer"}


async def test_tenant_admins_act_as_workspace_admins(api: Api, tenant: Tenant, team: Team) -> None:
    tenant_admin = await new_person(api, tenant, "admin")  # not a row in the Team workspace
    assert tenant_admin.id not in await roles(api, team)
    added = await call(api, tenant_admin, "POST", team.path, json={"user_id": team.outsider.id, "role": "viewer"})
    assert added.status_code == 201, added.text
    assert_error(await call(api, tenant_admin, "PATCH", f"{team.path}/{team.owner.id}", json={"role": "member"}), 403, "FORBIDDEN")


# --- owners, transfer and the last owner -----------------------------------------------


async def test_last_owner_cannot_be_demoted_or_removed(api: Api, team: Team) -> None:
    own = f"{team.path}/{team.owner.id}"
    error = assert_error(await call(api, team.owner, "PATCH", own, json={"role": "admin"}), 409, "LAST_OWNER")
    assert "last owner" in error["message"]
    assert_error(await call(api, team.owner, "DELETE", own), 409, "LAST_OWNER")
    tenant_owner_key = await create_key(api, team.owner.token, name="owner key", key_type="user")
    assert_error(await api.request("DELETE", f"{API}{own}", key=tenant_owner_key["key"]), 409, "LAST_OWNER")
    same = await call(api, team.owner, "PATCH", own, json={"role": "owner"})  # no change: allowed
    assert same.status_code == 200, same.text
    assert (await roles(api, team))[team.owner.id] == "owner"


async def test_ownership_transfer(api: Api, team: Team) -> None:
    promote = await call(api, team.owner, "PATCH", f"{team.path}/{team.admin.id}", json={"role": "owner"})
    assert promote.status_code == 200 and promote.json()["data"]["role"] == "owner"
    step_down = await call(api, team.owner, "PATCH", f"{team.path}/{team.owner.id}", json={"role": "member"})
    # The tenant owner still acts as owner through the tenant role; the row is what changes.
    assert step_down.status_code == 200 and step_down.json()["data"]["role"] == "member"
    new_owner = team.admin
    assert_error(await call(api, new_owner, "PATCH", f"{team.path}/{new_owner.id}", json={"role": "viewer"}), 409, "LAST_OWNER")
    assert_error(await call(api, new_owner, "DELETE", f"{team.path}/{new_owner.id}"), 409, "LAST_OWNER")
    # The new owner can now do what only owners do: delete the workspace.
    deleted = await call(api, new_owner, "DELETE", f"/workspaces/{team.workspace['id']}")
    assert deleted.status_code == 200, deleted.text


async def test_only_owners_can_touch_owners(api: Api, team: Team) -> None:
    made = await call(api, team.owner, "PATCH", f"{team.path}/{team.member.id}", json={"role": "owner"})
    assert made.status_code == 200
    assert_error(await call(api, team.admin, "PATCH", f"{team.path}/{team.member.id}", json={"role": "viewer"}), 403, "FORBIDDEN")
    removed = await call(api, team.member, "DELETE", f"{team.path}/{team.owner.id}")  # one owner removes another
    assert removed.status_code == 200, removed.text
    listing = await call(api, team.member, "GET", team.path)
    assert team.owner.id not in {m["user_id"] for m in listing.json()["data"]}


# --- change and remove -----------------------------------------------------------------


async def test_change_role_errors(api: Api, team: Team) -> None:
    target = f"{team.path}/{team.member.id}"
    assert_error(await call(api, team.owner, "PATCH", target, json={}), 422, "MISSING_ROLE")
    error = assert_error(await call(api, team.owner, "PATCH", target, json={"role": "root"}), 422, "VALIDATION_ERROR")
    assert "role" in error["details"]
    assert_error(await call(api, team.owner, "PATCH", f"{team.path}/{team.outsider.id}", json={"role": "viewer"}), 404, "NOT_FOUND")
    assert_error(await call(api, team.owner, "PATCH", f"{team.path}/{UNKNOWN_ID}", json={"role": "viewer"}), 404, "NOT_FOUND")
    assert_error(await call(api, team.owner, "PATCH", f"{team.path}/usr_123", json={"role": "viewer"}), 400, "INVALID_ID")
    assert_error(await call(api, team.owner, "GET", "/workspaces/nope/members"), 400, "INVALID_ID")
    assert_error(await call(api, team.owner, "GET", f"/workspaces/{UNKNOWN_ID}/members"), 404, "NOT_FOUND")
    assert (await roles(api, team))[team.member.id] == "member"


async def test_remove_takes_the_member_out_of_the_workspace_only(api: Api, team: Team) -> None:
    removed = await call(api, team.admin, "DELETE", f"{team.path}/{team.member.id}")
    assert removed.status_code == 200 and removed.json() == {"deleted": True}
    assert_error(await call(api, team.member, "GET", f"/workspaces/{team.workspace['id']}"), 404, "NOT_FOUND")
    still_in_org = await call(api, team.member, "GET", "/tenant")
    assert still_in_org.status_code == 200 and still_in_org.json()["data"]["role"] == "member"
    assert_error(await call(api, team.admin, "DELETE", f"{team.path}/{team.member.id}"), 404, "NOT_FOUND")


async def test_members_may_leave(api: Api, team: Team) -> None:
    left = await call(api, team.viewer, "DELETE", f"{team.path}/{team.viewer.id}")
    assert left.status_code == 200, left.text
    assert team.viewer.id not in await roles(api, team)


async def test_member_changes_are_audited(api: Api, tenant: Tenant, team: Team) -> None:
    await call(api, team.admin, "PATCH", f"{team.path}/{team.member.id}", json={"role": "viewer"})
    await call(api, team.admin, "PATCH", f"{team.path}/{team.owner.id}", json={"role": "viewer"})  # refused
    log = (await api.request("GET", f"{API}/audit-log?workspace_id={team.workspace['id']}", key=tenant.key)).json()["data"]
    updates = [(e["action"], e["resource_id"], e["outcome"]) for e in log if e["action"] == "workspace_members.update"]
    assert updates == [
        ("workspace_members.update", team.owner.id, "failure"),
        ("workspace_members.update", team.member.id, "success"),
    ]


async def test_scopes_and_restricted_keys(api: Api, tenant: Tenant, team: Team) -> None:
    read_only = await create_key(api, tenant.key, name="read", key_type="user", scopes=["org:read"])
    assert (await api.request("GET", f"{API}{team.path}", key=read_only["key"])).status_code == 200
    response = await api.request(
        "POST", f"{API}{team.path}", key=read_only["key"], json={"user_id": team.outsider.id, "role": "member"}
    )
    assert_error(response, 403, "insufficient_scope")
    elsewhere = await create_key(api, tenant.key, name="ws", key_type="platform", workspace_id=tenant.workspace_id)
    assert_error(await api.request("GET", f"{API}{team.path}", key=elsewhere["key"]), 404, "NOT_FOUND")
    mine = await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}/members", key=elsewhere["key"])
    assert mine.status_code == 200


async def test_other_tenants_cannot_see_members(api: Api, team: Team, other_tenant: Tenant) -> None:
    stranger = await owner_of(api, other_tenant)
    assert_error(await call(api, stranger, "GET", team.path), 404, "NOT_FOUND")
    response = await call(api, stranger, "POST", team.path, json={"user_id": stranger.id, "role": "owner"})
    assert_error(response, 404, "NOT_FOUND")
    assert stranger.id not in await roles(api, team)
