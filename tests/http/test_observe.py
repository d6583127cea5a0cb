"""A record of every API request (`corral.http.observe`), as metrics and the access log get it."""

from __future__ import annotations

import trio

from corral.http.observe import UNMATCHED, RequestRecord
from tests.support import Api, Tenant

API = "/api/v1"


async def test_each_request_is_recorded_with_its_route_tenant_status_and_id(api: Api, tenant: Tenant) -> None:
    seen: list[RequestRecord] = []
    api.platform.request_observers.append(seen.append)
    ok = await api.request("GET", f"{API}/workspaces/{tenant.workspace_id}", key=tenant.key)
    missing = await api.request("GET", f"{API}/no/such/route", key=tenant.key)
    refused = await api.request("GET", f"{API}/tenant")
    health = await api.request("GET", "/healthz")
    wanted = {response.headers["x-request-id"] for response in (ok, missing, refused)}
    with trio.fail_after(10):  # observers hear of a request just after its answer went out
        while not (wanted <= {record.request_id for record in seen} and any(record.path == "/healthz" for record in seen)):
            await trio.sleep(0.01)
    api.platform.request_observers.remove(seen.append)

    by_id = {record.request_id: record for record in seen}
    first = by_id[ok.headers["x-request-id"]]
    assert (first.method, first.route, first.status, first.tenant_id) == ("GET", f"{API}/workspaces/{{id}}", 200, tenant.id)
    assert first.response_bytes == len(ok.content) and first.duration_seconds > 0
    assert tenant.workspace_id not in first.route  # a template, never the path
    assert (by_id[missing.headers["x-request-id"]].route, by_id[missing.headers["x-request-id"]].status) == (UNMATCHED, 404)
    unauthenticated = by_id[refused.headers["x-request-id"]]
    assert (unauthenticated.route, unauthenticated.status, unauthenticated.tenant_id) == (f"{API}/tenant", 401, None)
    assert [record.route for record in seen if record.path == "/healthz"] == ["/healthz"] and health.status_code == 200


async def test_a_failing_observer_does_not_fail_the_request(api: Api, tenant: Tenant) -> None:
    def broken(record: RequestRecord) -> None:
        raise RuntimeError("observer bug")

    api.platform.request_observers.append(broken)
    try:
        assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200
    finally:
        api.platform.request_observers.remove(broken)
