"""Workspaces and projects: CRUD, role rules, isolation, restricted keys, and attribution."""

from __future__ import annotations

from typing import Any

import pytest

from corral.actors.tenancy import Attribution, Placement, resolve_attribution
from corral.errors import ApiError
from corral.models import parse
from tests.support import API, Api, Tenant, assert_error

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def user_key(
    api: Api, tenant: Tenant, tenant_role: str = "member", workspace_role: str | None = None
) -> tuple[str, str]:
    """(user_id, user key) of a new member; `workspace_role` overrides their role in the default workspace."""
    user_id, _ = await api.create_user(tenant, tenant_role)
    if workspace_role is not None:
        await api.platform.db.execute(
            "UPDATE workspace_members SET role = ? WHERE workspace_id = ? AND user_id = ?",
            (workspace_role, tenant.workspace_id, user_id),
        )
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "user_id": user_id, "name": "k", "key_type": "user"},
    )
    assert response.status_code == 201, response.text
    return user_id, response.json()["data"]["key"]


async def join(api: Api, workspace_id: str, user_id: str, role: str) -> None:
    await api.platform.db.execute(
        "INSERT INTO workspace_members (workspace_id, user_id, role, joined_at) VALUES (?, ?, ?, '2026-01-01T00:00:00.000000Z')",
        (workspace_id, user_id, role),
    )


async def new_workspace(api: Api, key: str, name: str = "Team", **extra: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/workspaces", key=key, json={"name": name, **extra})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def new_project(api: Api, key: str, name: str = "App", **extra: Any) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/projects", key=key, json={"name": name, **extra})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


# --- workspaces ------------------------------------------------------------------------


async def test_create_and_read_workspace(api: Api, tenant: Tenant) -> None:
    created = await new_workspace(api, tenant.key, "Data Science")
    assert created["name"] == "Data Science"
    assert created["slug"] == "data-science"
    assert created["is_default"] is False
    assert created["tenant_id"] == tenant.id
    assert created["role"] == "owner"
    assert created["created_at"] and created["updated_at"]

    fetched = await api.request("GET", f"{API}/workspaces/{created['id']}", key=tenant.key)
    assert fetched.status_code == 200
    assert fetched.json()["data"]["id"] == created["id"]

    listed = (await api.request("GET", f"{API}/workspaces", key=tenant.key)).json()["data"]
    assert [w["id"] for w in listed] == [tenant.workspace_id, created["id"]]

    projects = (
        await api.request("GET", f"{API}/workspaces/{created['id']}/projects", key=tenant.key)
    ).json()["data"]
    assert [(p["slug"], p["is_default"], p["workspace_id"]) for p in projects] == [
        ("default", True, created["id"])
    ]


async def test_workspace_slugs(api: Api, tenant: Tenant) -> None:
    first = await new_workspace(api, tenant.key, "Team")
    second = await new_workspace(api, tenant.key, "Team")
    assert first["slug"] == "team"
    assert second["slug"] != "team" and second["slug"].startswith("team")
    explicit = await new_workspace(api, tenant.key, "Whatever", slug="ops")
    assert explicit["slug"] == "ops"
    error = assert_error(
        await api.request(
            "POST", f"{API}/workspaces", key=tenant.key, json={"name": "Ops 2", "slug": "ops"}
        ),
        409,
        "SLUG_TAKEN",
    )
    assert "slug" in error["message"]
    assert_error(
        await api.request(
            "POST", f"{API}/workspaces", key=tenant.key, json={"name": "D", "slug": "default"}
        ),
        409,
        "SLUG_TAKEN",
    )
    unicode_only = await new_workspace(api, tenant.key, "日本")
    assert unicode_only["slug"]


async def test_same_slug_in_another_tenant_is_fine(
    api: Api, tenant: Tenant, other_tenant: Tenant
) -> None:
    await new_workspace(api, tenant.key, "Shared", slug="shared")
    assert (await new_workspace(api, other_tenant.key, "Shared", slug="shared"))["slug"] == "shared"


async def test_workspace_validation(api: Api, tenant: Tenant) -> None:
    for body, field in (
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ok", "slug": "Upper"}, "slug"),
        ({"name": "ok", "slug": "-lead"}, "slug"),
        ({"name": "ok", "slug": "has space"}, "slug"),
        ({"name": "ok", "slug": "a" * 64}, "slug"),
    ):
        error = assert_error(
            await api.request("POST", f"{API}/workspaces", key=tenant.key, json=body),
            422,
            "VALIDATION_ERROR",
        )
        assert field in error["details"], body


async def test_invalid_and_unknown_ids(api: Api, tenant: Tenant) -> None:
    for method in ("GET", "PATCH", "DELETE"):
        assert_error(
            await api.request(method, f"{API}/workspaces/not-a-uuid", key=tenant.key, json={}),
            400,
            "INVALID_ID",
        )
        assert_error(
            await api.request(method, f"{API}/projects/12345", key=tenant.key, json={}),
            400,
            "INVALID_ID",
        )
        assert_error(
            await api.request(method, f"{API}/workspaces/{UNKNOWN_ID}", key=tenant.key, json={}),
            404,
            "NOT_FOUND",
        )
        assert_error(
            await api.request(method, f"{API}/projects/{UNKNOWN_ID}", key=tenant.key, json={}),
            404,
            "NOT_FOUND",
        )
    assert_error(
        await api.request("GET", f"{API}/workspaces/nope/projects", key=tenant.key),
        400,
        "INVALID_ID",
    )
    assert_error(
        await api.request("GET", f"{API}/projects?workspace_id=nope", key=tenant.key),
        400,
        "INVALID_ID",
    )


async def test_rename_workspace(api: Api, tenant: Tenant) -> None:
    workspace = await new_workspace(api, tenant.key, "Old")
    response = await api.request(
        "PATCH", f"{API}/workspaces/{workspace['id']}", key=tenant.key, json={"name": "New"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["name"] == "New"
    assert response.json()["data"]["slug"] == "old"
    response = await api.request(
        "PATCH", f"{API}/workspaces/{workspace['id']}", key=tenant.key, json={"slug": "renamed"}
    )
    assert response.json()["data"] | {"updated_at": None} == {
        **workspace,
        "name": "New",
        "slug": "renamed",
        "updated_at": None,
    }
    fetched = (
        await api.request("GET", f"{API}/workspaces/{workspace['id']}", key=tenant.key)
    ).json()["data"]
    assert (fetched["name"], fetched["slug"]) == ("New", "renamed")


async def test_rename_conflicts(api: Api, tenant: Tenant) -> None:
    first = await new_workspace(api, tenant.key, "First")
    await new_workspace(api, tenant.key, "Second")
    assert_error(
        await api.request(
            "PATCH", f"{API}/workspaces/{first['id']}", key=tenant.key, json={"slug": "second"}
        ),
        409,
        "SLUG_TAKEN",
    )
    # The default workspace keeps its slug, but can be renamed.
    assert (
        await api.request(
            "PATCH",
            f"{API}/workspaces/{tenant.workspace_id}",
            key=tenant.key,
            json={"slug": "main"},
        )
    ).status_code == 409
    renamed = await api.request(
        "PATCH", f"{API}/workspaces/{tenant.workspace_id}", key=tenant.key, json={"name": "Main"}
    )
    assert renamed.status_code == 200 and renamed.json()["data"]["slug"] == "default"
    assert_error(
        await api.request(
            "PATCH", f"{API}/workspaces/{first['id']}", key=tenant.key, json={"slug": "Bad Slug"}
        ),
        422,
        "VALIDATION_ERROR",
    )


async def test_delete_workspace(api: Api, tenant: Tenant) -> None:
    workspace = await new_workspace(api, tenant.key)
    project = await new_project(api, tenant.key, workspace_id=workspace["id"])
    response = await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=tenant.key)
    assert response.status_code == 200
    assert response.json() == {"data": {"id": workspace["id"], "deleted": True}}
    assert_error(
        await api.request("GET", f"{API}/workspaces/{workspace['id']}", key=tenant.key),
        404,
        "NOT_FOUND",
    )
    assert_error(
        await api.request("GET", f"{API}/projects/{project['id']}", key=tenant.key),
        404,
        "NOT_FOUND",
    )
    assert_error(
        await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=tenant.key),
        404,
        "NOT_FOUND",
    )
    assert [
        w["id"]
        for w in (await api.request("GET", f"{API}/workspaces", key=tenant.key)).json()["data"]
    ] == [tenant.workspace_id]
    # Its slug is free again.
    assert (await new_workspace(api, tenant.key, "Team"))["slug"] == workspace["slug"]


async def test_default_workspace_cannot_be_deleted(api: Api, tenant: Tenant) -> None:
    response = await api.request(
        "DELETE", f"{API}/workspaces/{tenant.workspace_id}", key=tenant.key
    )
    assert response.status_code == 409
    assert response.json()["error"]["request_id"] == response.headers["X-Request-Id"]
    assert (
        await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=tenant.key)
    ).status_code == 200


# --- roles -----------------------------------------------------------------------------


async def test_viewer_reads_only(api: Api, tenant: Tenant) -> None:
    _, viewer = await user_key(api, tenant, "member", workspace_role="viewer")
    listed = await api.request("GET", f"{API}/workspaces", key=viewer)
    assert [(w["id"], w["role"]) for w in listed.json()["data"]] == [
        (tenant.workspace_id, "viewer")
    ]
    assert (
        await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=viewer)
    ).status_code == 200
    assert (
        await api.request("GET", f"{API}/projects/{tenant.project_id}", key=viewer)
    ).status_code == 200
    assert [
        p["id"] for p in (await api.request("GET", f"{API}/projects", key=viewer)).json()["data"]
    ] == [tenant.project_id]

    for method, path, body in (
        ("PATCH", f"/workspaces/{tenant.workspace_id}", {"name": "mine"}),
        ("DELETE", f"/workspaces/{tenant.workspace_id}", None),
        ("POST", "/projects", {"name": "p"}),
        ("POST", "/projects", {"name": "p", "workspace_id": tenant.workspace_id}),
        ("PATCH", f"/projects/{tenant.project_id}", {"name": "mine"}),
        ("DELETE", f"/projects/{tenant.project_id}", None),
    ):
        assert_error(
            await api.request(method, f"{API}{path}", key=viewer, json=body), 403, "FORBIDDEN"
        )
    assert await api.platform.db.fetch_value("SELECT COUNT(*) FROM projects") == 1


async def test_members_create_and_manage_projects(api: Api, tenant: Tenant) -> None:
    _, member = await user_key(api, tenant, "member")
    project = await new_project(api, member, "Member App")
    assert project["workspace_id"] == tenant.workspace_id  # the default workspace
    assert project["slug"] == "member-app" and project["is_default"] is False
    renamed = await api.request(
        "PATCH", f"{API}/projects/{project['id']}", key=member, json={"name": "Renamed"}
    )
    assert renamed.status_code == 200 and renamed.json()["data"]["name"] == "Renamed"
    # Members neither delete projects nor administer the workspace.
    assert_error(
        await api.request("DELETE", f"{API}/projects/{project['id']}", key=member), 403, "FORBIDDEN"
    )
    assert_error(
        await api.request(
            "PATCH", f"{API}/workspaces/{tenant.workspace_id}", key=member, json={"name": "x"}
        ),
        403,
        "FORBIDDEN",
    )
    assert_error(
        await api.request("DELETE", f"{API}/workspaces/{tenant.workspace_id}", key=member),
        403,
        "FORBIDDEN",
    )


async def test_members_see_only_their_workspaces(api: Api, tenant: Tenant) -> None:
    user_id, member = await user_key(api, tenant, "member")
    private = await new_workspace(api, tenant.key, "Private")
    private_project = await new_project(api, tenant.key, workspace_id=private["id"])
    assert [
        w["id"] for w in (await api.request("GET", f"{API}/workspaces", key=member)).json()["data"]
    ] == [tenant.workspace_id]
    assert_error(
        await api.request("GET", f"{API}/workspaces/{private['id']}", key=member), 404, "NOT_FOUND"
    )
    assert_error(
        await api.request("GET", f"{API}/projects/{private_project['id']}", key=member),
        404,
        "NOT_FOUND",
    )
    assert_error(
        await api.request(
            "POST", f"{API}/projects", key=member, json={"name": "x", "workspace_id": private["id"]}
        ),
        404,
        "NOT_FOUND",
    )
    assert private_project["id"] not in {
        p["id"] for p in (await api.request("GET", f"{API}/projects", key=member)).json()["data"]
    }
    await join(api, private["id"], user_id, "member")
    assert (
        await api.request("GET", f"{API}/workspaces/{private['id']}", key=member)
    ).status_code == 200


async def test_member_owns_the_workspace_they_create(api: Api, tenant: Tenant) -> None:
    _, member = await user_key(api, tenant, "member")
    workspace = await new_workspace(api, member, "Mine")
    assert workspace["role"] == "owner"
    assert (
        await api.request(
            "PATCH", f"{API}/workspaces/{workspace['id']}", key=member, json={"name": "Still mine"}
        )
    ).status_code == 200
    assert (
        await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=member)
    ).status_code == 200


async def test_admins_rename_but_only_owners_delete(api: Api, tenant: Tenant) -> None:
    workspace = await new_workspace(api, tenant.key, "Shared")
    _, tenant_admin = await user_key(api, tenant, "admin")
    response = await api.request(
        "PATCH", f"{API}/workspaces/{workspace['id']}", key=tenant_admin, json={"name": "By admin"}
    )
    assert response.status_code == 200
    assert response.json()["data"]["role"] == "admin"
    assert_error(
        await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=tenant_admin),
        403,
        "FORBIDDEN",
    )

    ws_admin_id, ws_admin = await user_key(api, tenant, "member")
    await join(api, workspace["id"], ws_admin_id, "admin")
    assert (
        await api.request(
            "PATCH",
            f"{API}/workspaces/{workspace['id']}",
            key=ws_admin,
            json={"name": "By ws admin"},
        )
    ).status_code == 200
    project = await new_project(api, tenant.key, workspace_id=workspace["id"])
    assert (
        await api.request("DELETE", f"{API}/projects/{project['id']}", key=ws_admin)
    ).status_code == 200
    assert_error(
        await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=ws_admin),
        403,
        "FORBIDDEN",
    )

    ws_owner_id, ws_owner = await user_key(api, tenant, "member")
    await join(api, workspace["id"], ws_owner_id, "owner")
    assert (
        await api.request("DELETE", f"{API}/workspaces/{workspace['id']}", key=ws_owner)
    ).status_code == 200


# --- projects --------------------------------------------------------------------------


async def test_project_crud(api: Api, tenant: Tenant) -> None:
    workspace = await new_workspace(api, tenant.key)
    project = await new_project(api, tenant.key, "Web Site", workspace_id=workspace["id"])
    assert project["workspace_id"] == workspace["id"] and project["tenant_id"] == tenant.id
    assert project["slug"] == "web-site"
    fetched = await api.request("GET", f"{API}/projects/{project['id']}", key=tenant.key)
    assert fetched.json()["data"] == project

    by_workspace = (
        await api.request("GET", f"{API}/projects?workspace_id={workspace['id']}", key=tenant.key)
    ).json()["data"]
    assert {p["id"] for p in by_workspace} == {
        project["id"],
        next(p["id"] for p in by_workspace if p["is_default"]),
    }
    everything = (await api.request("GET", f"{API}/projects", key=tenant.key)).json()["data"]
    assert {p["id"] for p in by_workspace} | {tenant.project_id} == {p["id"] for p in everything}

    patched = await api.request(
        "PATCH", f"{API}/projects/{project['id']}", key=tenant.key, json={"slug": "site"}
    )
    assert patched.json()["data"]["slug"] == "site"
    deleted = await api.request("DELETE", f"{API}/projects/{project['id']}", key=tenant.key)
    assert deleted.json() == {"data": {"id": project["id"], "deleted": True}}
    assert_error(
        await api.request("GET", f"{API}/projects/{project['id']}", key=tenant.key),
        404,
        "NOT_FOUND",
    )


async def test_project_slug_conflicts_and_defaults(api: Api, tenant: Tenant) -> None:
    await new_project(api, tenant.key, "API", slug="api")
    assert_error(
        await api.request(
            "POST", f"{API}/projects", key=tenant.key, json={"name": "API 2", "slug": "api"}
        ),
        409,
        "SLUG_TAKEN",
    )
    second = await new_project(api, tenant.key, "Api")
    assert second["slug"] != "api"
    assert_error(
        await api.request(
            "PATCH", f"{API}/projects/{second['id']}", key=tenant.key, json={"slug": "api"}
        ),
        409,
        "SLUG_TAKEN",
    )
    # The same slug in another workspace is fine.
    workspace = await new_workspace(api, tenant.key)
    assert (await new_project(api, tenant.key, "API", slug="api", workspace_id=workspace["id"]))[
        "slug"
    ] == "api"
    # The default project stays.
    response = await api.request("DELETE", f"{API}/projects/{tenant.project_id}", key=tenant.key)
    assert response.status_code == 409
    assert (
        await api.request(
            "PATCH", f"{API}/projects/{tenant.project_id}", key=tenant.key, json={"slug": "x"}
        )
    ).status_code == 409
    assert (
        await api.request("GET", f"{API}/projects/{tenant.project_id}", key=tenant.key)
    ).status_code == 200


async def test_project_validation(api: Api, tenant: Tenant) -> None:
    for body, status, code in (
        ({}, 422, "VALIDATION_ERROR"),
        ({"name": "x", "slug": "NO"}, 422, "VALIDATION_ERROR"),
        ({"name": "x", "workspace_id": UNKNOWN_ID}, 404, "NOT_FOUND"),
    ):
        assert_error(
            await api.request("POST", f"{API}/projects", key=tenant.key, json=body), status, code
        )
    response = await api.request(
        "POST", f"{API}/projects", key=tenant.key, json={"name": "x", "workspace_id": "nope"}
    )
    assert response.status_code in (400, 422)


# --- isolation -------------------------------------------------------------------------


async def test_other_tenants_workspaces_and_projects_are_404(
    api: Api, tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = await new_workspace(api, other_tenant.key, "Theirs")
    their_project = await new_project(api, other_tenant.key, workspace_id=theirs["id"])
    for workspace_id in (theirs["id"], other_tenant.workspace_id):
        for method, body in (("GET", None), ("PATCH", {"name": "pwned"}), ("DELETE", None)):
            assert_error(
                await api.request(
                    method, f"{API}/workspaces/{workspace_id}", key=tenant.key, json=body
                ),
                404,
                "NOT_FOUND",
            )
        assert_error(
            await api.request("GET", f"{API}/workspaces/{workspace_id}/projects", key=tenant.key),
            404,
            "NOT_FOUND",
        )
        assert_error(
            await api.request("GET", f"{API}/projects?workspace_id={workspace_id}", key=tenant.key),
            404,
            "NOT_FOUND",
        )
        assert_error(
            await api.request(
                "POST",
                f"{API}/projects",
                key=tenant.key,
                json={"name": "x", "workspace_id": workspace_id},
            ),
            404,
            "NOT_FOUND",
        )
    for project_id in (their_project["id"], other_tenant.project_id):
        for method, body in (("GET", None), ("PATCH", {"name": "pwned"}), ("DELETE", None)):
            assert_error(
                await api.request(
                    method, f"{API}/projects/{project_id}", key=tenant.key, json=body
                ),
                404,
                "NOT_FOUND",
            )
    mine = {
        w["id"]
        for w in (await api.request("GET", f"{API}/workspaces", key=tenant.key)).json()["data"]
    }
    assert mine == {tenant.workspace_id}
    # Nothing of theirs changed.
    still = (
        await api.request("GET", f"{API}/workspaces/{theirs['id']}", key=other_tenant.key)
    ).json()["data"]
    assert still["name"] == "Theirs"


# --- keys restricted to one workspace --------------------------------------------------


async def test_platform_key_restricted_to_one_workspace(api: Api, tenant: Tenant) -> None:
    allowed = await new_workspace(api, tenant.key, "Allowed")
    hidden = await new_workspace(api, tenant.key, "Hidden")
    response = await api.request(
        "POST",
        f"{API}/api-keys",
        key=tenant.key,
        json={"name": "ws", "key_type": "platform", "workspace_id": allowed["id"]},
    )
    assert response.status_code == 201, response.text
    assert response.json()["data"]["workspace_id"] == allowed["id"]
    key = response.json()["data"]["key"]

    listed = (await api.request("GET", f"{API}/workspaces", key=key)).json()["data"]
    assert [w["id"] for w in listed] == [allowed["id"]]
    assert (
        await api.request("GET", f"{API}/workspaces/{allowed['id']}", key=key)
    ).status_code == 200
    for workspace_id in (hidden["id"], tenant.workspace_id):
        assert_error(
            await api.request("GET", f"{API}/workspaces/{workspace_id}", key=key), 404, "NOT_FOUND"
        )
        assert_error(
            await api.request("GET", f"{API}/workspaces/{workspace_id}/projects", key=key),
            404,
            "NOT_FOUND",
        )
        assert_error(
            await api.request(
                "POST", f"{API}/projects", key=key, json={"name": "x", "workspace_id": workspace_id}
            ),
            404,
            "NOT_FOUND",
        )
    assert_error(
        await api.request("GET", f"{API}/projects/{tenant.project_id}", key=key), 404, "NOT_FOUND"
    )
    assert_error(
        await api.request("POST", f"{API}/workspaces", key=key, json={"name": "Escape"}),
        403,
        "FORBIDDEN",
    )

    project = await new_project(api, key, "Inside", workspace_id=allowed["id"])
    assert project["workspace_id"] == allowed["id"]
    # Without a workspace_id, a restricted key creates in its own workspace.
    implicit = await new_project(api, key, "Implicit")
    assert implicit["workspace_id"] == allowed["id"]
    projects = (await api.request("GET", f"{API}/projects", key=key)).json()["data"]
    assert {p["workspace_id"] for p in projects} == {allowed["id"]}


async def test_workspace_restriction_validation(
    api: Api, tenant: Tenant, other_tenant: Tenant
) -> None:
    for workspace_id, status, code in (
        (other_tenant.workspace_id, 422, "VALIDATION_ERROR"),
        (UNKNOWN_ID, 422, "VALIDATION_ERROR"),
        ("nope", 400, "INVALID_ID"),
    ):
        response = await api.request(
            "POST",
            f"{API}/api-keys",
            key=tenant.key,
            json={"name": "ws", "key_type": "platform", "workspace_id": workspace_id},
        )
        assert_error(response, status, code)


# --- attribution -----------------------------------------------------------------------


async def attribute(
    db: Any, tenant_id: str | None, body: dict[str, Any], creator_id: str | None = None
) -> Attribution:
    """Resolve the placement a request body names, as the create routes do."""
    return await resolve_attribution(db, tenant_id, parse(Placement, body), creator_id)



async def attribution_error(api: Api, tenant_id: str | None, body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await attribute(api.platform.db, tenant_id, body)
    return caught.value


async def test_attribution_defaults(api: Api, tenant: Tenant) -> None:
    result = await attribute(api.platform.db, tenant.id, {})
    assert (result.tenant_id, result.workspace_id, result.project_id) == (
        tenant.id,
        tenant.workspace_id,
        tenant.project_id,
    )
    assert (
        result.external_workspace_id is None
        and result.external_user_id is None
        and result.external_project_id is None
    )
    assert result.as_dict()["workspace_id"] == tenant.workspace_id


async def test_attribution_without_tenant(api: Api) -> None:
    error = await attribution_error(api, None, {"workspace_slug": "x"})
    assert (error.status, error.code) == (422, "TENANT_RESOLUTION_FAILED")


async def test_attribution_by_workspace_id(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    workspace = await new_workspace(api, tenant.key)
    result = await attribute(
        api.platform.db, tenant.id, {"workspace_id": workspace["id"]}
    )
    assert result.workspace_id == workspace["id"]
    default_project = (
        await api.request("GET", f"{API}/workspaces/{workspace['id']}/projects", key=tenant.key)
    ).json()["data"]
    assert result.project_id == default_project[0]["id"]
    # The id wins over a slug or name.
    result = await attribute(
        api.platform.db,
        tenant.id,
        {
            "workspace_id": workspace["id"],
            "workspace_slug": "elsewhere",
            "workspace_name": "Elsewhere",
        },
    )
    assert result.workspace_id == workspace["id"]
    assert (
        await api.platform.db.fetch_value(
            "SELECT COUNT(*) FROM workspaces WHERE slug = 'elsewhere'"
        )
        == 0
    )
    for workspace_id in (other_tenant.workspace_id, UNKNOWN_ID):
        error = await attribution_error(api, tenant.id, {"workspace_id": workspace_id})
        assert (error.status, error.code) == (422, "VALIDATION_ERROR")
        assert error.details is not None and "workspace_id" in error.details
    error = await attribution_error(api, tenant.id, {"workspace_id": "nope"})
    assert error.code == "VALIDATION_ERROR"


async def test_attribution_by_workspace_slug_existing_or_created(api: Api, tenant: Tenant) -> None:
    existing = await new_workspace(api, tenant.key, "Existing", slug="existing")
    assert (
        await attribute(api.platform.db, tenant.id, {"workspace_slug": "existing"})
    ).workspace_id == existing["id"]
    assert (
        await attribute(api.platform.db, tenant.id, {"workspace_slug": "default"})
    ).workspace_id == tenant.workspace_id

    first = await attribute(
        api.platform.db, tenant.id, {"workspace_slug": "customer-42"}, creator_id=tenant.owner_id
    )
    again = await attribute(api.platform.db, tenant.id, {"workspace_slug": "customer-42"})
    assert first == again
    created = (
        await api.request("GET", f"{API}/workspaces/{first.workspace_id}", key=tenant.key)
    ).json()["data"]
    assert created["slug"] == "customer-42" and created["is_default"] is False
    projects = (
        await api.request("GET", f"{API}/workspaces/{first.workspace_id}/projects", key=tenant.key)
    ).json()["data"]
    assert [(p["id"], p["slug"], p["is_default"]) for p in projects] == [
        (first.project_id, "default", True)
    ]
    owner = await api.platform.db.fetch_value(
        "SELECT role FROM workspace_members WHERE workspace_id = ? AND user_id = ?",
        (first.workspace_id, tenant.owner_id),
    )
    assert owner == "owner"

    error = await attribution_error(api, tenant.id, {"workspace_slug": "Not A Slug"})
    assert (
        error.code == "VALIDATION_ERROR"
        and error.details is not None
        and "workspace_slug" in error.details
    )


async def test_attribution_by_workspace_name(api: Api, tenant: Tenant) -> None:
    first = await attribute(
        api.platform.db, tenant.id, {"workspace_name": "Customer Forty Two"}
    )
    again = await attribute(
        api.platform.db, tenant.id, {"workspace_name": "Customer Forty Two"}
    )
    assert first.workspace_id == again.workspace_id
    row = await api.platform.db.fetch_one(
        "SELECT name, slug FROM workspaces WHERE id = ?", (first.workspace_id,)
    )
    assert row == {"name": "Customer Forty Two", "slug": "customer-forty-two"}
    # Slug and name together: the slug finds or makes it, the name names it.
    both = await attribute(
        api.platform.db, tenant.id, {"workspace_slug": "acme", "workspace_name": "Acme Corp"}
    )
    row = await api.platform.db.fetch_one(
        "SELECT name, slug FROM workspaces WHERE id = ?", (both.workspace_id,)
    )
    assert row == {"name": "Acme Corp", "slug": "acme"}


async def test_attribution_finds_a_renamed_workspace_by_name(api: Api, tenant: Tenant) -> None:
    """A workspace whose slug no longer matches its name is still found by name, not duplicated."""
    workspace = await new_workspace(api, tenant.key, "Research", slug="r-and-d")
    result = await attribute(api.platform.db, tenant.id, {"workspace_name": "Research"})
    assert result.workspace_id == workspace["id"]
    unsluggable = await attribute(api.platform.db, tenant.id, {"workspace_name": "研究"})
    assert (
        await attribute(api.platform.db, tenant.id, {"workspace_name": "研究"})
    ).workspace_id == unsluggable.workspace_id


async def test_attribution_projects(api: Api, tenant: Tenant) -> None:
    db = api.platform.db
    by_slug = await attribute(db, tenant.id, {"project_slug": "web"})
    assert by_slug.workspace_id == tenant.workspace_id and by_slug.project_id != tenant.project_id
    assert (
        await attribute(db, tenant.id, {"project_slug": "web"})
    ).project_id == by_slug.project_id
    assert (
        await attribute(db, tenant.id, {"project_slug": "default"})
    ).project_id == tenant.project_id

    by_name = await attribute(db, tenant.id, {"project_name": "Mobile App"})
    row = await db.fetch_one(
        "SELECT name, slug, workspace_id FROM projects WHERE id = ?", (by_name.project_id,)
    )
    assert row == {"name": "Mobile App", "slug": "mobile-app", "workspace_id": tenant.workspace_id}
    assert (
        await attribute(db, tenant.id, {"project_name": "Mobile App"})
    ).project_id == by_name.project_id

    assert (
        await attribute(db, tenant.id, {"project_id": by_name.project_id})
    ).project_id == by_name.project_id

    # Projects are looked up inside the chosen workspace.
    elsewhere = await attribute(
        db, tenant.id, {"workspace_slug": "other", "project_slug": "web"}
    )
    assert (
        elsewhere.workspace_id != tenant.workspace_id and elsewhere.project_id != by_slug.project_id
    )
    error = await attribution_error(
        api, tenant.id, {"workspace_slug": "other", "project_id": by_slug.project_id}
    )
    assert (
        error.code == "VALIDATION_ERROR"
        and error.details is not None
        and "project_id" in error.details
    )
    error = await attribution_error(api, tenant.id, {"project_id": UNKNOWN_ID})
    assert error.code == "VALIDATION_ERROR"


async def test_attribution_external_ids_and_bad_values(api: Api, tenant: Tenant) -> None:
    result = await attribute(
        api.platform.db,
        tenant.id,
        {
            "external_workspace_id": "org_9",
            "external_user_id": " user-1 ",
            "external_project_id": "p/7",
        },
    )
    assert (result.external_workspace_id, result.external_user_id, result.external_project_id) == (
        "org_9",
        "user-1",
        "p/7",
    )
    for body in (
        {"external_user_id": 5},
        {"external_user_id": ""},
        {"workspace_name": "x" * 300},
        {"project_slug": "UPPER"},
    ):
        error = await attribution_error(api, tenant.id, body)
        assert (error.status, error.code) == (422, "VALIDATION_ERROR")
        assert error.details is not None and set(error.details) == set(body)
    # Nothing was created by the refused calls.
    assert (
        await api.platform.db.fetch_value(
            "SELECT COUNT(*) FROM workspaces WHERE tenant_id = ?", (tenant.id,)
        )
        == 1
    )


async def test_attribution_does_not_cross_tenants(
    api: Api, tenant: Tenant, other_tenant: Tenant
) -> None:
    await new_workspace(api, other_tenant.key, "Theirs", slug="theirs")
    mine = await attribute(api.platform.db, tenant.id, {"workspace_slug": "theirs"})
    row = await api.platform.db.fetch_one(
        "SELECT tenant_id FROM workspaces WHERE id = ?", (mine.workspace_id,)
    )
    assert row == {"tenant_id": tenant.id}
