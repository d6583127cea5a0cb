"""Idempotency-Key through the HTTP pipeline (contract §12), on a probe route.

The deployments and databases routes declare `idempotent=True` and test a replay of
their own; this file tests the one mechanism: replays, reuse with another body,
a request still running, 5xx not stored, per-tenant keys, the 24-hour expiry, the
key's length limit, and a claim left by a process that is gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from quart.typing import TestClientProtocol as QuartClient

from corral.actors import idempotency
from corral.http.app import create_app, default_routers
from corral.http.context import RequestContext
from corral.http.replies import Reply, data
from corral.http.routing import Router
from tests.support import Api, Tenant

PROBE = "/api/v1/idempotency-probe"


class Probe:
    def __init__(self) -> None:
        self.calls = 0
        self.release = trio.Event()
        self.entered = trio.Event()


@pytest.fixture
async def probe_client(api: Api) -> AsyncIterator[tuple[QuartClient, Probe]]:
    probe = Probe()
    router = Router("probe")

    @router.post("/idempotency-probe", summary="probe", idempotent=True, status=201)
    async def run(ctx: RequestContext) -> Reply:
        body: dict[str, Any] = await ctx.request.get_json(force=True)
        probe.calls += 1
        if body.get("block"):
            probe.entered.set()
            await probe.release.wait()
        if body.get("fail"):
            raise RuntimeError("probe failure")
        return data({"call": probe.calls, "echo": body}, 201)

    app = create_app(api.platform, [router, *default_routers()])
    yield app.test_client(), probe


def auth(tenant: Tenant, key: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {tenant.key}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


async def test_a_repeat_replays_the_stored_reply(probe_client: tuple[QuartClient, Probe], tenant: Tenant) -> None:
    client, probe = probe_client
    first = await client.post(PROBE, json={"name": "a"}, headers=auth(tenant, "key-1"))
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post(PROBE, json={"name": "a"}, headers=auth(tenant, "key-1"))
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.get_json() == await first.get_json()
    assert probe.calls == 1
    # Without a key every request runs.
    await client.post(PROBE, json={"name": "a"}, headers=auth(tenant, None))
    await client.post(PROBE, json={"name": "a"}, headers=auth(tenant, None))
    assert probe.calls == 3


async def test_the_same_key_with_another_body_or_route_is_refused(
    probe_client: tuple[QuartClient, Probe], tenant: Tenant
) -> None:
    client, probe = probe_client
    assert (await client.post(PROBE, json={"name": "a"}, headers=auth(tenant, "key-2"))).status_code == 201
    reused = await client.post(PROBE, json={"name": "b"}, headers=auth(tenant, "key-2"))
    assert reused.status_code == 422
    assert (await reused.get_json())["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    other_route = await client.post(PROBE + "?x=1", json={"name": "a"}, headers=auth(tenant, "key-2"))
    assert (await other_route.get_json())["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert probe.calls == 1


async def test_keys_are_per_tenant(
    probe_client: tuple[QuartClient, Probe], tenant: Tenant, other_tenant: Tenant
) -> None:
    client, probe = probe_client
    await client.post(PROBE, json={}, headers=auth(tenant, "shared"))
    theirs = await client.post(PROBE, json={}, headers=auth(other_tenant, "shared"))
    assert theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs.headers
    assert probe.calls == 2


async def test_a_repeat_while_the_first_runs_is_in_progress(
    probe_client: tuple[QuartClient, Probe], tenant: Tenant
) -> None:
    client, probe = probe_client
    replies: list[int] = []

    async def first() -> None:
        replies.append((await client.post(PROBE, json={"block": True}, headers=auth(tenant, "slow"))).status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await probe.entered.wait()
        busy = await client.post(PROBE, json={"block": True}, headers=auth(tenant, "slow"))
        assert busy.status_code == 409
        assert (await busy.get_json())["error"]["code"] == "IDEMPOTENCY_IN_PROGRESS"
        probe.release.set()
    assert replies == [201]
    done = await client.post(PROBE, json={"block": True}, headers=auth(tenant, "slow"))
    assert done.headers["Idempotent-Replayed"] == "true"
    assert probe.calls == 1


async def test_server_errors_are_not_stored(probe_client: tuple[QuartClient, Probe], tenant: Tenant) -> None:
    client, probe = probe_client
    for _ in range(2):
        failed = await client.post(PROBE, json={"fail": True}, headers=auth(tenant, "flaky"))
        assert failed.status_code == 500
        assert "Idempotent-Replayed" not in failed.headers
    assert probe.calls == 2


async def test_client_errors_are_stored(probe_client: tuple[QuartClient, Probe], tenant: Tenant) -> None:
    client, _ = probe_client
    for _ in range(2):
        refused = await client.post(PROBE, data=b"not json", headers=auth(tenant, "bad-body"))
        assert refused.status_code == 400
    assert refused.headers["Idempotent-Replayed"] == "true"


async def test_key_length_limit(probe_client: tuple[QuartClient, Probe], tenant: Tenant) -> None:
    client, _ = probe_client
    longest = "k" * idempotency.MAX_KEY_LENGTH
    assert (await client.post(PROBE, json={}, headers=auth(tenant, longest))).status_code == 201
    too_long = await client.post(PROBE, json={}, headers=auth(tenant, longest + "k"))
    assert too_long.status_code == 400
    assert (await too_long.get_json())["error"]["code"] == "INVALID_IDEMPOTENCY_KEY"
    spaced = await client.post(PROBE, json={}, headers=auth(tenant, "two words"))
    assert spaced.status_code == 400


async def test_keys_expire_after_24_hours(
    probe_client: tuple[QuartClient, Probe], tenant: Tenant, api: Api
) -> None:
    client, probe = probe_client
    await client.post(PROBE, json={}, headers=auth(tenant, "old"))
    assert idempotency.TTL_SECONDS == 24 * 3600
    await api.platform.db.execute(
        "UPDATE idempotency_keys SET expires_at = '2000-01-01T00:00:00Z' WHERE tenant_id = ?", (tenant.id,)
    )
    again = await client.post(PROBE, json={"other": "body"}, headers=auth(tenant, "old"))
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again.headers
    assert probe.calls == 2


async def test_a_claim_of_a_process_that_is_gone_is_taken_over(
    probe_client: tuple[QuartClient, Probe], tenant: Tenant, api: Api
) -> None:
    client, probe = probe_client
    print_ = idempotency.fingerprint("POST", PROBE, b"{}")
    assert await idempotency.claim(api.platform.db, tenant.id, "orphan", print_) is None
    await api.platform.db.execute(
        "UPDATE idempotency_keys SET owner = 'a-crashed-process' WHERE tenant_id = ? AND idempotency_key = 'orphan'",
        (tenant.id,),
    )
    taken = await client.post(PROBE, data=b"{}", headers={**auth(tenant, "orphan"), "Content-Type": "application/json"})
    assert taken.status_code == 201
    assert probe.calls == 1
    replay = await client.post(PROBE, data=b"{}", headers={**auth(tenant, "orphan"), "Content-Type": "application/json"})
    assert replay.headers["Idempotent-Replayed"] == "true"
