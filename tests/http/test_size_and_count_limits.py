"""Size and count limits of the specification through HTTP, at the limit and just past it.

Already tested elsewhere: the preview token TTL (default, 86400, 86401:
test_previews), the transactions page size (20, 100, clamped: test_credits),
webhook retry_count (test_webhooks), the exec timeout (test_exec_limits), SSE
ticket reuse and expiry (test_sandbox_streams). The 253-character custom domain
limit belongs to computer and deployment domains, which come with deployments
(preview domains are apex domains, far shorter).
"""

from __future__ import annotations

import hashlib

from tests.support import Api, Tenant, assert_error

API = "/api/v1"
TEN_MB = 10 * 1024 * 1024


async def test_an_upload_of_exactly_ten_megabytes_round_trips(runtime_api: Api, owner: Tenant) -> None:
    created = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    base = f"{API}/sandboxes/{created.json()['data']['id']}/files"
    data = hashlib.sha256(b"seed").digest() * (TEN_MB // 32)
    assert len(data) == TEN_MB
    up = await runtime_api.request("POST", f"{base}/upload", key=owner.key, files={"file": ("big.bin", data)})
    assert up.status_code == 201, up.text
    assert up.json()["file"]["size_bytes"] == TEN_MB
    down = await runtime_api.request("GET", f"{base}/download", key=owner.key, params={"path": "/workspace/big.bin"})
    assert down.status_code == 200 and down.content == data
    past = await runtime_api.request("POST", f"{base}/upload", key=owner.key, files={"file": ("big.bin", data + b"x")})
    assert_error(past, 413, "FILE_TOO_LARGE")
    kept = await runtime_api.request("GET", f"{base}/download", key=owner.key, params={"path": "/workspace/big.bin"})
    assert kept.content == data  # the refused upload left the file as it was


async def test_ten_concurrent_sandboxes_by_default_and_the_eleventh_is_refused(runtime_api: Api, owner: Tenant) -> None:
    ids = []
    for n in range(10):
        response = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={"name": f"n{n}"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["data"]["id"])
    refused = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    assert "limit of 10" in assert_error(refused, 409, "SANDBOX_LIMIT_REACHED")["message"]
    stopped = await runtime_api.request("POST", f"{API}/sandboxes/{ids[0]}/stop", key=owner.key)
    assert stopped.status_code == 200  # a stopped sandbox does not count
    again = await runtime_api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    assert again.status_code == 201, again.text


async def test_an_sse_ticket_lives_60_seconds(api: Api, tenant: Tenant) -> None:
    response = await api.request("POST", f"{API}/auth/sse-ticket", key=tenant.key)
    assert response.status_code in (200, 201), response.text
    assert response.json()["expires_in"] == 60
