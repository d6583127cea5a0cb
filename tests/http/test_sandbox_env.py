"""Sandbox environment variables: the API, encryption at rest, and their use by exec and processes."""

from __future__ import annotations

import pytest

from corral.storage import DecryptionError, associated_data
from tests.support import API, Api, Tenant, assert_error

from .test_sandboxes import create, run


async def put(api: Api, tenant: Tenant, sandbox_id: str, *variables: dict[str, object]) -> list[dict[str, object]]:
    response = await api.request("PUT", f"{API}/sandboxes/{sandbox_id}/env", key=tenant.key, json={"vars": list(variables)})
    assert response.status_code == 200, response.text
    listed: list[dict[str, object]] = response.json()["data"]
    return listed


async def test_set_list_use_and_delete(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner, env={"FROM_CREATE": "yes"})
    sid = sandbox["id"]
    listed = await put(runtime_api, owner, sid, {"key": "API_TOKEN", "value": "s3cret value"}, {"key": "MODE", "value": "dev", "encrypted": False})
    assert listed == [
        {"key": "API_TOKEN", "encrypted": True},
        {"key": "FROM_CREATE", "encrypted": True},
        {"key": "MODE", "encrypted": False},
    ]
    # Upsert: MODE changes, keys not listed are untouched.
    await put(runtime_api, owner, sid, {"key": "MODE", "value": "prod"})
    got = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/env", key=owner.key)
    assert got.status_code == 200
    assert got.json() == {"data": [{"key": "API_TOKEN", "encrypted": True}, {"key": "FROM_CREATE", "encrypted": True}, {"key": "MODE", "encrypted": True}]}
    assert "s3cret" not in got.text

    result = await run(runtime_api, owner, sid, 'echo "$API_TOKEN|$MODE|$FROM_CREATE"')
    assert result["stdout"] == "s3cret value|prod|yes\n"
    overridden = await run(runtime_api, owner, sid, 'echo "$MODE"', env={"MODE": "request"})
    assert overridden["stdout"] == "request\n"

    deleted = await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}/env/MODE", key=owner.key)
    assert deleted.status_code == 200 and deleted.json() == {"deleted": True, "name": "MODE"}
    assert (await run(runtime_api, owner, sid, 'echo "[$MODE]"'))["stdout"] == "[]\n"
    assert_error(await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}/env/MODE", key=owner.key), 404, "NOT_FOUND")


async def test_values_are_encrypted_at_rest_and_bound_to_their_sandbox(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    await put(runtime_api, owner, sid, {"key": "DB_PASSWORD", "value": "hunter2-plaintext"})
    row = await runtime_api.platform.db.fetch_one("SELECT * FROM sandbox_env WHERE sandbox_id = ?", (sid,))
    assert row is not None and b"hunter2" not in bytes(row["value"])
    box = runtime_api.platform.secrets
    assert box.decrypt_text(row["value"], associated_data(owner.id, sid, "sandbox-env:DB_PASSWORD")) == "hunter2-plaintext"
    with pytest.raises(DecryptionError):  # another sandbox, or another key, cannot open it
        box.decrypt_text(row["value"], associated_data(owner.id, "other-sandbox", "sandbox-env:DB_PASSWORD"))
    with pytest.raises(DecryptionError):
        box.decrypt_text(row["value"], associated_data(owner.id, sid, "sandbox-env:OTHER"))
    await runtime_api.platform.db.later.flush()  # audit rows and events are written behind the answer
    audit = await runtime_api.platform.db.fetch_all("SELECT * FROM audit_events WHERE tenant_id = ?", (owner.id,))
    assert audit and not any("hunter2" in str(entry) for entry in audit)


async def test_a_fork_inherits_the_environment(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    await put(runtime_api, owner, sandbox["id"], {"key": "CARRIED", "value": "over"})
    forked = await runtime_api.request("POST", f"{API}/sandboxes/{sandbox['id']}/fork", key=owner.key)
    assert forked.status_code == 201, forked.text
    fork_id = forked.json()["data"]["id"]
    assert (await run(runtime_api, owner, fork_id, 'echo "$CARRIED"'))["stdout"] == "over\n"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"vars": []},
        {"vars": "A=1"},
        {"vars": [{"key": "lower", "value": "x"}]},
        {"vars": [{"key": "1ABC", "value": "x"}]},
        {"vars": [{"key": "A-B", "value": "x"}]},
        {"vars": [{"value": "x"}]},
        {"vars": [{"key": "OK"}]},
        {"vars": [{"key": "OK", "value": 3}]},
        {"vars": [{"key": "OK", "value": "x", "encrypted": "yes"}]},
        {"vars": ["OK=x"]},
    ],
)
async def test_invalid_vars(runtime_api: Api, owner: Tenant, body: dict[str, object]) -> None:
    sandbox = await create(runtime_api, owner)
    response = await runtime_api.request("PUT", f"{API}/sandboxes/{sandbox['id']}/env", key=owner.key, json=body)
    error = assert_error(response, 400, "INVALID_VARS")
    assert error["message"] == "invalid vars" and "vars" in error["details"]
    listed = await runtime_api.request("GET", f"{API}/sandboxes/{sandbox['id']}/env", key=owner.key)
    assert listed.json()["data"] == []  # nothing of a refused request was stored


async def test_ids_and_scopes(runtime_api: Api, owner: Tenant) -> None:
    assert_error(await runtime_api.request("GET", f"{API}/sandboxes/not-a-uuid/env", key=owner.key), 400, "INVALID_ID")
    missing = "00000000-0000-4000-8000-000000000000"
    assert_error(await runtime_api.request("GET", f"{API}/sandboxes/{missing}/env", key=owner.key), 404, "NOT_FOUND")
    body = {"vars": [{"key": "A", "value": "b"}]}
    assert_error(await runtime_api.request("PUT", f"{API}/sandboxes/not-a-uuid/env", key=owner.key, json=body), 400, "INVALID_ID")
    assert_error(await runtime_api.request("PUT", f"{API}/sandboxes/{missing}/env", key=owner.key, json=body), 404, "NOT_FOUND")
    sandbox = await create(runtime_api, owner)
    reader = await runtime_api.request(
        "POST", f"{API}/api-keys", key=owner.key, json={"name": "reader", "scopes": ["sandboxes:read"]}
    )
    read_key = reader.json()["data"]["key"]
    assert (await runtime_api.request("GET", f"{API}/sandboxes/{sandbox['id']}/env", key=read_key)).status_code == 200
    refused = await runtime_api.request("PUT", f"{API}/sandboxes/{sandbox['id']}/env", key=read_key, json=body)
    assert_error(refused, 403, "insufficient_scope")
