"""The egress audit live tail over real WebSockets: per resource, per tenant, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from corral.actors import egress
from tests.support import Api, Tenant, member_key

from .test_egress import sandbox_row

PROTOCOL = "svc-egress-audit-v1"


def ws_url(api: Api, path: str, token: str) -> str:
    return f"ws://127.0.0.1:{api.platform.settings.port}/api/v1/egress/audit/{path}?token={token}"


async def record(api: Api, tenant: Tenant, host: str, resource_id: str | None = None) -> egress.AuditRecord:
    entry = egress.AuditEntry(
        tenant_id=tenant.id, host=host, action="allow", resource_id=resource_id, resource_type="sandbox" if resource_id else None
    )
    return await egress.record_request(api.platform, entry)


async def next_frame(connection: Any) -> dict[str, Any]:
    with trio.fail_after(1):  # within a second of the request
        frame: dict[str, Any] = json.loads(await connection.get_message())
    return frame


async def test_resource_and_tenant_tails_push_each_row(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    sandbox_id = await sandbox_row(api, tenant)
    async with open_websocket_url(ws_url(api, f"resource/{sandbox_id}", tenant.key), subprotocols=[PROTOCOL]) as resource_ws, \
            open_websocket_url(ws_url(api, f"tenant/{tenant.id}", tenant.key), subprotocols=[PROTOCOL]) as tenant_ws:
        assert resource_ws.subprotocol == PROTOCOL
        await trio.sleep(0.1)  # the subscriptions are in place once accepted
        await record(api, other_tenant, "elsewhere.test")
        await record(api, tenant, "tenant-only.test")
        row = await record(api, tenant, "api.stripe.com", sandbox_id)
        frame = await next_frame(resource_ws)
        assert frame == {"type": "audit_event", "data": egress.audit_public(row)}
        assert (await next_frame(tenant_ws))["data"]["host"] == "tenant-only.test"
        assert (await next_frame(tenant_ws))["data"]["id"] == row.id


async def _rejected(api: Api, path: str, token: str, subprotocols: list[str] | None = None) -> int:
    with pytest.raises(ConnectionRejected) as rejected:
        async with open_websocket_url(ws_url(api, path, token), subprotocols=subprotocols or [PROTOCOL]):
            pass
    status: int = rejected.value.status_code
    return status


async def test_refusals(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    sandbox_id = await sandbox_row(api, tenant)
    assert await _rejected(api, f"resource/{sandbox_id}", "not-a-key") == 401
    assert await _rejected(api, f"resource/{sandbox_id}", other_tenant.key) == 404
    assert await _rejected(api, f"tenant/{tenant.id}", other_tenant.key) == 404
    _, member = await member_key(api, tenant, "member")
    assert await _rejected(api, f"tenant/{tenant.id}", member) == 403
    assert await _rejected(api, f"resource/{sandbox_id}", tenant.key, ["other-protocol"]) == 400
