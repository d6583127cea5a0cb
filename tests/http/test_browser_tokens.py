"""Browser tokens (contract §16): minted for one sandbox, refused everywhere else."""

from __future__ import annotations

import trio

from corral.storage import parse_iso, utc_now
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error, create_key

from .test_sandboxes import create


async def mint(api: Api, key: str, sandbox_id: str, **body: object) -> dict[str, object]:
    response = await api.request("POST", f"{API}/browser-tokens", key=key, json={"sandbox_id": sandbox_id, **body})
    assert response.status_code == 201, response.text
    data: dict[str, object] = response.json()["data"]
    return data


def ttl(minted: dict[str, object]) -> float:
    return (parse_iso(str(minted["expires_at"])) - utc_now()).total_seconds()


async def test_a_token_reaches_its_sandbox_and_nothing_else(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox, other = await create(api, owner), await create(api, owner)
    minted = await mint(api, owner.key, sandbox["id"])
    assert set(minted) == {"token", "expires_at", "sandbox_id"} and minted["sandbox_id"] == sandbox["id"]
    token = str(minted["token"])
    assert token.startswith("mbt_")
    assert 3590 < ttl(minted) <= 3600  # the default

    got = await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=token)
    assert got.status_code == 200 and got.json()["data"]["id"] == sandbox["id"]
    ran = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/exec", key=token, json={"command": "echo hi"})
    assert ran.status_code == 200 and ran.json()["stdout"] == "hi\n"
    written = await api.request(
        "POST", f"{API}/sandboxes/{sandbox['id']}/processes", key=token, json={"cmd": "sleep 1", "name": "p"}
    )
    assert written.status_code == 201, written.text

    # Another sandbox of the same tenant: 404, as if it did not exist.
    assert_error(await api.request("GET", f"{API}/sandboxes/{other['id']}", key=token), 404, "NOT_FOUND")
    assert_error(
        await api.request("POST", f"{API}/sandboxes/{other['id']}/exec", key=token, json={"command": "true"}), 404, "NOT_FOUND"
    )
    # Anything outside /sandboxes/{id}: 403.
    for method, path in [
        ("GET", "/sandboxes"),
        ("POST", "/sandboxes"),
        ("GET", "/tenant"),
        ("GET", "/credits/balance"),
        ("GET", "/api-keys"),
        ("POST", "/browser-tokens"),
        ("POST", f"/sandboxes/{sandbox['id']}/fork"),
        ("DELETE", f"/sandboxes/{sandbox['id']}"),
    ]:
        response = await api.request(method, f"{API}{path}", key=token, json={"sandbox_id": sandbox["id"]})
        assert_error(response, 403, "FORBIDDEN")
    assert (await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=owner.key)).json()["data"]["status"] == "running"

    # The token is kept as a digest only, and never lands in the audit log.
    rows = await api.platform.db.fetch_all("SELECT * FROM browser_tokens")
    assert rows and token not in str(rows)
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    audit = await api.platform.db.fetch_all("SELECT * FROM audit_events WHERE tenant_id = ?", (owner.id,))
    assert audit and token not in str(audit)
    by_token = [row for row in audit if row["actor_type"] == "browser_token"]
    assert by_token and {row["path"] for row in by_token} >= {f"/api/v1/sandboxes/{sandbox['id']}/exec"}


async def test_expires_in_limits(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await create(api, owner)
    assert 86390 < ttl(await mint(api, owner.key, sandbox["id"], expires_in=86400)) <= 86400  # the maximum
    for bad in (86401, 0, -5, "60", 1.5):
        response = await api.request(
            "POST", f"{API}/browser-tokens", key=owner.key, json={"sandbox_id": sandbox["id"], "expires_in": bad}
        )
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert "expires_in" in error["details"]
    short = await mint(api, owner.key, sandbox["id"], expires_in=1)  # the minimum
    assert (await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=str(short["token"]))).status_code == 200
    await trio.sleep(1.3)
    assert_error(await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=str(short["token"])), 401, "invalid_token")


async def test_mint_errors_and_isolation(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await create(api, owner)
    stranger = await api.create_tenant("Stranger")
    assert_error(await api.request("POST", f"{API}/browser-tokens", key=owner.key, json={}), 400, "MISSING_PARAM")
    assert_error(
        await api.request("POST", f"{API}/browser-tokens", key=owner.key, json={"sandbox_id": "nope"}), 400, "INVALID_ID"
    )
    assert_error(await api.request("POST", f"{API}/browser-tokens", key=owner.key, content=b"{"), 400, "INVALID_BODY")
    assert_error(
        await api.request("POST", f"{API}/browser-tokens", key=stranger.key, json={"sandbox_id": sandbox["id"]}), 404, "NOT_FOUND"
    )
    assert_error(await api.request("POST", f"{API}/browser-tokens", json={"sandbox_id": sandbox["id"]}), 401, "invalid_token")
    reader = await create_key(api, owner.key, scopes=["sandboxes:read"])
    assert_error(
        await api.request("POST", f"{API}/browser-tokens", key=reader["key"], json={"sandbox_id": sandbox["id"]}),
        403,
        "insufficient_scope",
    )
    assert_error(await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key="mbt_not-a-token"), 401, "invalid_token")


async def test_a_token_dies_with_its_minting_key_and_its_sandbox(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await create(api, owner)
    key = await create_key(api, owner.key, scopes=["sandboxes:write"])
    token = str((await mint(api, key["key"], sandbox["id"]))["token"])
    assert (await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=token)).status_code == 200
    revoked = await api.request("DELETE", f"{API}/api-keys/{key['id']}", key=owner.key)
    assert revoked.status_code == 200, revoked.text
    assert_error(await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=token), 401, "invalid_token")

    token = str((await mint(api, owner.key, sandbox["id"]))["token"])
    deleted = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}", key=owner.key)
    assert deleted.status_code == 200
    assert_error(await api.request("GET", f"{API}/sandboxes/{sandbox['id']}", key=token), 404, "NOT_FOUND")


async def test_a_browser_ticket_opens_only_its_sandbox_streams(runtime_api: Api, owner: Tenant) -> None:
    """A page holding only the token can follow its sandbox with an EventSource (`?ticket=`)."""
    api = runtime_api
    sandbox, other = await create(api, owner), await create(api, owner)
    token = str((await mint(api, owner.key, sandbox["id"]))["token"])

    async def ticket() -> str:
        response = await api.request("POST", f"{API}/auth/sse-ticket", key=token)
        assert response.status_code == 200, response.text
        return str(response.json()["ticket"])

    async with open_sse(api.client, f"{API}/sandboxes/{sandbox['id']}/events?ticket={await ticket()}") as stream:
        await stream.wait_connected()
        ran = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/exec", key=token, json={"command": "echo via-browser"})
        assert ran.status_code == 200
        frames = await stream.frames_until("sandbox.exec.completed")
        assert any(f.event == "sandbox.exec.stdout" and f.data["line"] == "via-browser" for f in frames)
    # The same kind of ticket opens neither another sandbox's stream nor any other stream.
    elsewhere = (
        f"/sandboxes/{other['id']}/events",
        f"/sandboxes/{other['id']}/logs/stream",
        f"/sandbox-template-builds/{other['id']}/logs/stream",
    )
    for path in elsewhere:
        assert_error(await api.client.get(f"{API}{path}?ticket={await ticket()}"), 401, "UNAUTHORIZED")
    # The owner's own tickets still open every stream.
    general = (await api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)).json()["ticket"]
    async with open_sse(api.client, f"{API}/sandboxes/{other['id']}/events?ticket={general}") as stream:
        await stream.wait_connected()
