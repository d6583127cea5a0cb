"""The client against a real server (no instances): errors, isolation, auth, tickets."""

from __future__ import annotations

from typing import Any

import pytest

from corral.client import (
    BadRequest,
    Client,
    CorralConnectionError,
    NotFound,
    Unauthorized,
    Unprocessable,
    unwrap,
)
from tests.client.support import async_client, base_url, in_thread, sync_client
from tests.support import Api, Tenant


async def test_sync_client_creates_lists_and_isolates(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    def work() -> tuple[dict[str, object], list[dict[str, object]]]:
        with sync_client(api, tenant.key) as corral:
            created = unwrap(corral.create_workspace(name="Client Made"))
            listed = unwrap(corral.list_workspaces())
        return created, listed

    created, listed = await in_thread(work)
    assert created["name"] == "Client Made"
    assert created["id"] in {w["id"] for w in listed}

    def foreign() -> None:
        with sync_client(api, other_tenant.key) as corral:
            corral.get_workspace(str(created["id"]))

    with pytest.raises(NotFound) as caught:
        await in_thread(foreign)
    assert caught.value.status == 404 and caught.value.request_id


async def test_errors_carry_the_envelope(api: Api, tenant: Tenant) -> None:
    async with async_client(api, tenant.key) as corral:
        with pytest.raises(BadRequest) as invalid:
            await corral.get_sandbox("not-a-uuid")
        assert invalid.value.status == 400 and invalid.value.code
        assert invalid.value.request_id
        with pytest.raises(Unprocessable) as rejected:
            await corral.create_workspace(name="")
        assert rejected.value.code == "VALIDATION_ERROR" and rejected.value.details
    async with async_client(api, "msk_wrong") as wrong:
        with pytest.raises(Unauthorized):
            await wrong.list_sandboxes()


async def test_health_and_the_openapi_document(api: Api) -> None:
    async with async_client(api, None) as corral:
        assert await corral.health() == {"status": "ok"}

    def document() -> object:
        with sync_client(api, None) as corral:
            return corral.openapi()

    assert "/api/v1/sandboxes" in (await in_thread(document))["paths"]  # type: ignore[index]


def test_an_unreachable_server_is_one_clear_error() -> None:
    with Client("http://127.0.0.1:9", "k", max_retries=1, backoff=0.01) as corral, pytest.raises(CorralConnectionError) as caught:
        corral.list_sandboxes()
    assert caught.value.code == "CONNECTION_ERROR"


async def test_ticket_minting(api: Api, tenant: Tenant) -> None:
    async with async_client(api, tenant.key) as corral:
        ticket = await corral.mint_ticket()
        assert isinstance(ticket, str) and ticket
    assert base_url(api).startswith("http://127.0.0.1:")


async def test_idempotency_keys_are_sent_and_replayed(api: Api, tenant: Tenant) -> None:
    path = "/api/v1/projects/{project_id}/deployments"
    async with async_client(api, tenant.key) as corral:
        def create(name: str, key: str | None) -> Any:
            return corral.call("POST", path, path={"project_id": tenant.project_id}, body={"name": name}, idempotent=True, idempotency_key=key)

        first = unwrap(await create("once", "client-key-1"))
        replayed = unwrap(await create("once", "client-key-1"))
        assert replayed["id"] == first["id"]  # the stored reply: created once
        automatic = unwrap(await create("once", None))
        assert automatic["id"] != first["id"]  # a fresh key per call
        with pytest.raises(Unprocessable) as reused:
            await create("another body", "client-key-1")
        assert reused.value.code == "IDEMPOTENCY_KEY_REUSED"
