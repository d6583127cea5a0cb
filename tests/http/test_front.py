"""The front (`corral.http.front`): the API's routes served without Quart, the rest by
Quart, with the same answers either way."""

from __future__ import annotations

from typing import Any

import pytest

from corral.http.app import default_routers
from corral.http.front import ApiFront
from tests.support import Api, Tenant, assert_error

API = "/api/v1"


@pytest.fixture
def front() -> ApiFront:
    """The front over every route (matching only: nothing is run or passed on)."""

    async def nothing(*args: Any) -> Any:
        raise AssertionError("not called")

    return ApiFront([route for router in default_routers() for route in router.routes], nothing, nothing, 1024)


def http(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, object]:
    return {"type": "http", "method": method, "path": path, "headers": headers or [], "query_string": b""}


def test_what_the_front_serves_and_what_it_leaves_to_quart(front: ApiFront) -> None:
    served = front.match(http("GET", f"{API}/sandboxes/2b7e1e5e-0a3f-4a65-9a51-8d3c5a1e2f40"))
    assert served is not None and served[0].endpoint == "get /api/v1/sandboxes/{id}"
    assert served[1] == {"id": "2b7e1e5e-0a3f-4a65-9a51-8d3c5a1e2f40"}
    # A static path beats a parameter at the same place, as werkzeug (Quart) orders them.
    static = front.match(http("GET", f"{API}/sandboxes"))
    assert static is not None and static[0].endpoint == "get /api/v1/sandboxes"
    for unserved in (
        http("GET", f"{API}/nowhere"),  # Quart's 404 envelope
        http("PATCH", f"{API}/sandboxes"),  # Quart's 405 envelope
        http("HEAD", f"{API}/sandboxes"),
        http("GET", "/healthz"),
        http("POST", f"{API}/sandboxes/2b7e1e5e-0a3f-4a65-9a51-8d3c5a1e2f40/files/upload", [(b"content-type", b"multipart/form-data; boundary=x")]),
        http("POST", f"{API}/sandboxes", [(b"Content-Type", b"application/x-www-form-urlencoded")]),
        {"type": "websocket", "path": f"{API}/sandboxes", "headers": []},
        {"type": "lifespan"},
    ):
        assert front.match(unserved) is None, unserved


async def test_answers_are_those_quart_gave(api: Api, tenant: Tenant) -> None:
    ok = await api.request("GET", f"{API}/tenant", key=tenant.key)
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"
    assert int(ok.headers["content-length"]) == len(ok.content)
    assert ok.headers["x-request-id"].startswith("req_") and ok.headers["x-ratelimit-limit"]
    assert_error(await api.request("GET", f"{API}/nowhere", key=tenant.key), 404, "NOT_FOUND")
    assert_error(await api.request("PATCH", f"{API}/tenant", key=tenant.key), 405, "METHOD_NOT_ALLOWED")
    assert_error(await api.request("GET", f"{API}/tenant"), 401, "invalid_token")
    bad_json = await api.request("POST", f"{API}/workspaces", key=tenant.key, content=b"{nope", headers={"Content-Type": "application/json"})
    assert_error(bad_json, 400, "INVALID_BODY")
    too_large = await api.request("POST", f"{API}/workspaces", key=tenant.key, content=b"x" * (12 * 1024 * 1024))
    assert_error(too_large, 413, "PAYLOAD_TOO_LARGE")
    # A chunked body (no Content-Length) is read whole.

    async def chunks():  # type: ignore[no-untyped-def]
        yield b'{"name": '
        yield b'"chunked"}'

    made = await api.request("POST", f"{API}/workspaces", key=tenant.key, content=chunks(), headers={"Content-Type": "application/json"})
    assert made.status_code == 201 and made.json()["data"]["name"] == "chunked"
    # (Idempotency-Key replays through the front: tests/http/test_idempotency.py.)


async def test_a_key_revoked_behind_the_api_is_refused_at_once(api: Api, tenant: Tenant) -> None:
    assert (await api.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200  # read, and kept
    await api.platform.db.execute("UPDATE api_keys SET status = 'revoked' WHERE id = ?", (tenant.key_id,))
    assert_error(await api.request("GET", f"{API}/tenant", key=tenant.key), 401, "invalid_token")
