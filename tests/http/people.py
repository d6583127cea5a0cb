"""People for organization tests: users made through the operator endpoints, signed in with JWTs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support import API, PASSWORD, Api, Tenant

_n = itertools.count(1)


@dataclass
class Person:
    id: str
    email: str
    token: str
    """A JWT access token from POST /auth/login."""


async def login(api: Api, email: str, tenant_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"email": email, "password": PASSWORD}
    if tenant_id is not None:
        body["tenant_id"] = tenant_id
    response = await api.client.post(f"{API}/auth/login", json=body)
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()
    return session


async def new_person(api: Api, tenant: Tenant | None = None, role: str = "member", email: str | None = None) -> Person:
    """A user made with POST /admin/users (in `tenant` with `role`, or in no tenant) and signed in."""
    email = email or f"person{next(_n)}-{id(api)}@example.test"
    body: dict[str, Any] = {"email": email, "password": PASSWORD, "name": email.split("@")[0]}
    if tenant is not None:
        body.update(tenant_id=tenant.id, role=role)
    response = await api.admin("POST", f"{API}/admin/users", json=body)
    assert response.status_code == 201, response.text
    user_id = response.json()["data"]["user"]["id"]
    return Person(user_id, email, (await login(api, email))["token"])


async def owner_of(api: Api, tenant: Tenant) -> Person:
    return Person(tenant.owner_id, tenant.owner_email, (await login(api, tenant.owner_email))["token"])


async def call(api: Api, who: Person | str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """`path` below /api/v1, as `who` (a person's JWT, or any bearer credential)."""
    credential = who.token if isinstance(who, Person) else who
    return await api.request(method, f"{API}{path}", key=credential, **kwargs)


async def new_workspace(api: Api, who: Person | str, name: str = "Team") -> dict[str, Any]:
    response = await call(api, who, "POST", "/workspaces", json={"name": name})
    assert response.status_code == 201, response.text
    workspace: dict[str, Any] = response.json()["data"]
    return workspace


async def add_member(api: Api, who: Person | str, workspace_id: str, user_id: str, role: str) -> dict[str, Any]:
    response = await call(api, who, "POST", f"/workspaces/{workspace_id}/members", json={"user_id": user_id, "role": role})
    assert response.status_code == 201, response.text
    member: dict[str, Any] = response.json()["data"]
    return member


async def outbox(api: Api) -> list[dict[str, Any]]:
    response = await api.admin("GET", f"{API}/admin/outbox")
    assert response.status_code == 200, response.text
    mails: list[dict[str, Any]] = response.json()["data"]
    return mails
