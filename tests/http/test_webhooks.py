"""The webhook endpoints over HTTP: create, list, get, patch, delete, test, deliveries, errors."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.actors.webhooks import service as webhook_service
from corral.storage import Event
from corral.vm.templates import BUILD_REVISION
from tests.actors.webhooks.receiver import Receiver, https_receiver, verify_signatures
from tests.support import (
    API,
    TEMPLATE_CACHE,
    Api,
    Tenant,
    assert_error,
    create_key,
    member_key,
    running_server,
)

WEBHOOK_ID = re.compile(r"^wh_[0-9a-z]{26}$")
PUBLIC = {"id", "name", "url", "events", "headers", "retry_count", "metadata", "secret_preview", "created_at", "updated_at"}



@pytest.fixture
async def hooks_api(tmp_path: Path, receiver: Receiver) -> AsyncIterator[Api]:
    """A server that may reach loopback and trusts the receiver's CA."""
    async with running_server(
        tmp_path / "data",
        allow_private_destinations=True,
        ca_bundle=str(receiver.ca_path),
        webhook_retry_scale=0.01,
        webhook_poll_interval=0.1,
    ) as api:
        yield api


async def create(api: Api, tenant: Tenant, **body: Any) -> Any:
    return await api.request("POST", f"{API}/webhooks", key=tenant.key, json=body)


async def created(api: Api, tenant: Tenant, url: str, **body: Any) -> dict[str, Any]:
    response = await create(api, tenant, url=url, **body)
    assert response.status_code == 201, response.text
    hook: dict[str, Any] = response.json()["data"]
    return hook


async def test_retry_count_default_and_maximum(hooks_api: Api, receiver: Receiver) -> None:
    """retry_count is 0-10, 3 when omitted (11 and -1 are refused: see the validation test)."""
    tenant = await hooks_api.create_tenant()
    assert (await created(hooks_api, tenant, receiver.url()))["retry_count"] == 3
    assert (await created(hooks_api, tenant, receiver.url(), retry_count=10))["retry_count"] == 10
    assert (await created(hooks_api, tenant, receiver.url(), retry_count=0))["retry_count"] == 0


async def test_create_shows_the_secret_once(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url())
    assert set(hook) == PUBLIC | {"secret"}
    assert WEBHOOK_ID.match(hook["id"])
    assert hook["secret"].startswith("whsec_") and len(hook["secret"]) == 50
    assert hook["secret_preview"] == "whsec_..." + hook["secret"][-4:]
    assert (hook["url"], hook["name"], hook["events"], hook["headers"], hook["retry_count"], hook["metadata"]) == (
        receiver.url(), None, [], {}, 3, {}
    )

    fetched = await api.request("GET", f"{API}/webhooks/{hook['id']}", key=tenant.key)
    assert fetched.status_code == 200
    assert fetched.json()["data"] == {k: v for k, v in hook.items() if k != "secret"}
    listed = await api.request("GET", f"{API}/webhooks", key=tenant.key)
    assert listed.json() == {"data": [fetched.json()["data"]]}
    assert hook["secret"] not in fetched.text + listed.text

    row = await api.platform.db.fetch_one("SELECT secret FROM webhooks WHERE id = ?", (hook["id"],))
    assert row is not None and hook["secret"].encode() not in bytes(row["secret"])
    await api.platform.db.later.flush()  # audit rows and events are written behind the answer
    audit = await api.platform.db.fetch_all("SELECT * FROM audit_events WHERE resource_id = ?", (hook["id"],))
    assert [a["action"] for a in audit] == ["webhooks.create"]
    assert hook["secret"] not in json.dumps(audit)


async def test_create_with_every_field(hooks_api: Api, receiver: Receiver) -> None:
    tenant = await hooks_api.create_tenant()
    hook = await created(
        hooks_api, tenant, receiver.url("/all-fields?team=core"), name=" Builds ", events=["sandbox.ready", "billing.credit_low"],
        headers={"X-Team": "core", "Authorization": "Bearer downstream"}, retry_count=0, metadata={"owner": "ops"},
    )
    assert hook["name"] == "Builds"
    assert hook["events"] == ["sandbox.ready", "billing.credit_low"]
    assert hook["headers"] == {"X-Team": "core", "Authorization": "Bearer downstream"}
    assert (hook["retry_count"], hook["metadata"]) == (0, {"owner": "ops"})

    result = await hooks_api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    assert result.status_code == 200 and result.json()["delivered"] is True, result.text
    (received,) = receiver.requests
    assert received.path == "/all-fields"
    assert received.headers["x-team"] == "core" and received.headers["authorization"] == "Bearer downstream"


async def test_create_validation_errors(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "url"),
        ({"url": "http://localhost/hook"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": 42}, "url"),
        ({"url": receiver.url(), "retry_count": 11}, "retry_count"),
        ({"url": receiver.url(), "retry_count": -1}, "retry_count"),
        ({"url": receiver.url(), "retry_count": "3"}, "retry_count"),
        ({"url": receiver.url(), "events": ["sandbox.created", "nope"]}, "events"),
        ({"url": receiver.url(), "events": "sandbox.created"}, "events"),
        ({"url": receiver.url(), "headers": {"Content-Type": "text/plain"}}, "headers"),
        ({"url": receiver.url(), "headers": {"X-Service-Signature": "forged"}}, "headers"),
        ({"url": receiver.url(), "headers": {"X-Ok": "a\nb"}}, "headers"),
        ({"url": receiver.url(), "metadata": "x"}, "metadata"),
        ({"url": receiver.url(), "name": ["x"]}, "name"),
    ]
    for body, field in cases:
        error = assert_error(await create(api, tenant, **body), 422, "VALIDATION_ERROR")
        assert field in error["details"], (body, error)
    bad_json = await api.request("POST", f"{API}/webhooks", key=tenant.key, content=b"{nope", headers={"Content-Type": "application/json"})
    assert_error(bad_json, 400, "INVALID_BODY")
    listed = await api.request("GET", f"{API}/webhooks", key=tenant.key)
    assert listed.json() == {"data": []}


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://localhost:8443/hook",
        "https://10.0.0.8/hook",
        "https://192.168.1.20/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[fe80::1]/hook",
        "https://224.0.0.1/hook",
        "https://[::ffff:127.0.0.1]/hook",
    ],
)
async def test_private_destinations_are_refused_without_the_flag(api: Api, tenant: Tenant, url: str) -> None:
    assert not api.platform.settings.allow_private_destinations
    error = assert_error(await create(api, tenant, url=url), 422, "VALIDATION_ERROR")
    assert "resolves to" in error["details"]["url"]


async def test_a_host_that_does_not_resolve_yet_is_accepted_and_its_attempts_fail(api: Api, tenant: Tenant) -> None:
    """DNS for a receiver is often set up after the webhook: the name is checked when
    it is used, and until it resolves every attempt fails with the reason."""
    assert not api.platform.settings.allow_private_destinations
    hook = await created(api, tenant, "https://hook-1234.invalid/x", retry_count=0)
    assert hook["url"] == "https://hook-1234.invalid/x"
    result = await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    assert result.status_code == 200, result.text
    body = result.json()
    assert (body["delivered"], body["status_code"]) == (False, None)
    assert "hook-1234.invalid could not be resolved" in body["error"]
    sandbox_id = "0b0c4d02-3f5e-4cf8-9d55-6f2f1f0a0043"
    await api.platform.bus.publish(Event("sandbox.created", "sandbox", sandbox_id, {"sandbox_id": sandbox_id}, tenant_id=tenant.id))
    with trio.fail_after(10):
        while len(rows := (await api.request("GET", f"{API}/webhooks/{hook['id']}/deliveries", key=tenant.key)).json()["data"]) < 2:
            await trio.sleep(0.05)
    assert all(r["status"] == "failed" and "could not be resolved" in r["error"] for r in rows), rows
    # A URL change to an address that can never be right is still refused at once.
    patched = await api.request("PATCH", f"{API}/webhooks/{hook['id']}", key=tenant.key, json={"url": "https://127.0.0.1/x"})
    assert "resolves to 127.0.0.1" in assert_error(patched, 422, "VALIDATION_ERROR")["details"]["url"]


async def test_send_time_check_stops_a_destination_that_turned_private(hooks_api: Api, receiver: Receiver) -> None:
    """What DNS rebinding does: the name passed at creation and resolves privately later."""
    tenant = await hooks_api.create_tenant()
    hook = await created(hooks_api, tenant, receiver.url(), retry_count=0)
    hooks_api.platform.settings.allow_private_destinations = False
    result = await hooks_api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    body = result.json()
    assert (body["delivered"], body["status_code"]) == (False, None)
    assert "destination refused" in body["error"] and "127.0.0.1" in body["error"]

    sandbox_id = "0b0c4d02-3f5e-4cf8-9d55-6f2f1f0a0042"
    await hooks_api.platform.bus.publish(Event("sandbox.created", "sandbox", sandbox_id, {"sandbox_id": sandbox_id}, tenant_id=tenant.id))
    with trio.fail_after(10):
        while len(rows := (await hooks_api.request("GET", f"{API}/webhooks/{hook['id']}/deliveries", key=tenant.key)).json()["data"]) < 2:
            await trio.sleep(0.05)
    assert all(r["status"] == "failed" and "destination refused" in r["error"] for r in rows)
    assert receiver.requests == []


async def test_patch_changes_fields_but_never_the_secret(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url(), name="first")
    response = await api.request(
        "PATCH", f"{API}/webhooks/{hook['id']}", key=tenant.key,
        json={"name": "second", "events": ["sandbox.error"], "retry_count": 7, "headers": {"X-A": "1"},
              "metadata": {"k": "v"}, "url": receiver.url("/moved"), "secret": "whsec_mine"},
    )
    assert response.status_code == 200, response.text
    patched = response.json()["data"]
    assert set(patched) == PUBLIC
    assert (patched["name"], patched["events"], patched["retry_count"], patched["headers"], patched["metadata"], patched["url"]) == (
        "second", ["sandbox.error"], 7, {"X-A": "1"}, {"k": "v"}, receiver.url("/moved")
    )
    assert patched["secret_preview"] == hook["secret_preview"]
    assert patched["updated_at"] > hook["updated_at"] and patched["created_at"] == hook["created_at"]

    # Fields not given (or null) stay; an empty list subscribes to every type again.
    again = await api.request("PATCH", f"{API}/webhooks/{hook['id']}", key=tenant.key, json={"events": [], "name": None})
    assert (again.json()["data"]["events"], again.json()["data"]["name"], again.json()["data"]["retry_count"]) == ([], "second", 7)

    tested = await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    assert tested.json()["delivered"] is True
    verify_signatures(hook["secret"], receiver.requests[-1])  # still the original secret
    assert receiver.requests[-1].path == "/moved"

    for body, field in [({"retry_count": 11}, "retry_count"), ({"url": "http://x.test/"}, "url"), ({"events": ["x"]}, "events")]:
        error = assert_error(await api.request("PATCH", f"{API}/webhooks/{hook['id']}", key=tenant.key, json=body), 422, "VALIDATION_ERROR")
        assert field in error["details"]
    api.platform.settings.allow_private_destinations = False
    error = assert_error(
        await api.request("PATCH", f"{API}/webhooks/{hook['id']}", key=tenant.key, json={"url": "https://10.1.1.1/x"}), 422, "VALIDATION_ERROR"
    )
    assert "private" in error["details"]["url"]
    unchanged = await api.request("GET", f"{API}/webhooks/{hook['id']}", key=tenant.key)
    assert unchanged.json()["data"]["url"] == receiver.url("/moved")


async def test_delete_removes_the_webhook_and_its_deliveries(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url())
    await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    response = await api.request("DELETE", f"{API}/webhooks/{hook['id']}", key=tenant.key)
    assert response.status_code == 204 and response.content == b""
    for method, suffix in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/test"), ("GET", "/deliveries")]:
        kwargs = {"json": {}} if method in ("PATCH", "POST") else {}
        assert_error(await api.request(method, f"{API}/webhooks/{hook['id']}{suffix}", key=tenant.key, **kwargs), 404, "NOT_FOUND")
    remaining = await api.platform.db.fetch_value("SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = ?", (hook["id"],))
    assert remaining == 0


async def test_test_endpoint_reports_the_answer_and_is_listed(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url(), events=["sandbox.ready"])  # the test is sent whatever the filter
    result = await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)
    assert result.status_code == 200, result.text
    body = result.json()
    assert set(body) >= {"delivered", "status_code", "duration_ms"}
    assert (body["delivered"], body["status_code"], body["error"]) == (True, 200, None)
    assert isinstance(body["duration_ms"], int) and 0 <= body["duration_ms"] < 30000

    (received,) = receiver.requests
    verify_signatures(hook["secret"], received)
    payload = received.json
    assert set(payload) == {"id", "type", "created_at", "tenant_id", "data"}
    assert (payload["type"], payload["tenant_id"], payload["data"]["webhook_id"]) == ("webhook.test", tenant.id, hook["id"])
    assert payload["id"] == received.headers["webhook-id"] == body["event_id"]
    assert received.headers["x-service-delivery"] == body["delivery_id"]
    assert received.headers["x-service-event"] == "webhook.test"

    receiver.script("/hook", [500])
    failed = (await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)).json()
    assert (failed["delivered"], failed["status_code"], failed["error"]) == (False, 500, "HTTP 500")
    await trio.sleep(0.6)  # a test is never retried
    assert len(receiver.requests) == 2

    listed = await api.request("GET", f"{API}/webhooks/{hook['id']}/deliveries", key=tenant.key)
    rows = listed.json()["data"]
    assert [(r["id"], r["status"], r["status_code"], r["attempt"], r["event_type"]) for r in rows] == [
        (failed["delivery_id"], "failed", 500, 1, "webhook.test"),
        (body["delivery_id"], "delivered", 200, 1, "webhook.test"),
    ]
    assert listed.json()["next_cursor"] is None


async def test_an_untrusted_certificate_fails_without_the_ca_bundle(tmp_path: Path, receiver: Receiver) -> None:
    async with running_server(tmp_path / "plain", allow_private_destinations=True) as api:
        tenant = await api.create_tenant()
        hook = await created(api, tenant, receiver.url())
        result = (await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)).json()
    assert (result["delivered"], result["status_code"]) == (False, None)
    assert "CERTIFICATE_VERIFY_FAILED" in result["error"]
    assert receiver.requests == []


async def test_deliveries_pages_and_filters(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url())
    receiver.script("/hook", [200, 500, 200, 500, 200])
    ids = [(await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=tenant.key)).json()["delivery_id"] for _ in range(5)]
    base = f"{API}/webhooks/{hook['id']}/deliveries"
    seen: list[str] = []
    cursor = None
    while True:
        page = (await api.request("GET", base, key=tenant.key, params={"limit": 2, **({"cursor": cursor} if cursor else {})})).json()
        assert len(page["data"]) <= 2
        seen += [r["id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    failed = (await api.request("GET", base, key=tenant.key, params={"status": "failed"})).json()["data"]
    assert [r["id"] for r in failed] == [ids[3], ids[1]]
    assert_error(await api.request("GET", base, key=tenant.key, params={"limit": 0}), 400, "INVALID_PARAM")
    assert_error(await api.request("GET", base, key=tenant.key, params={"limit": 1001}), 400, "INVALID_PARAM")
    assert_error(await api.request("GET", base, key=tenant.key, params={"limit": "x"}), 400, "INVALID_PARAM")
    assert_error(await api.request("GET", base, key=tenant.key, params={"cursor": "nope"}), 400, "INVALID_PARAM")
    assert_error(await api.request("GET", base, key=tenant.key, params={"status": "pending"}), 400, "INVALID_PARAM")


async def test_another_tenants_webhook_is_absent_on_every_route(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant, other = await api.create_tenant(), await api.create_tenant("Other")
    hook = await created(api, tenant, receiver.url())
    for method, suffix in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/test"), ("GET", "/deliveries")]:
        kwargs = {"json": {"name": "stolen"}} if method in ("PATCH", "POST") else {}
        assert_error(await api.request(method, f"{API}/webhooks/{hook['id']}{suffix}", key=other.key, **kwargs), 404, "NOT_FOUND")
        assert_error(await api.request(method, f"{API}/webhooks/wh_nope{suffix}", key=tenant.key, **kwargs), 400, "INVALID_ID")
        missing = "wh_01jzzzzzzzzzzzzzzzzzzzzzzz"
        assert_error(await api.request(method, f"{API}/webhooks/{missing}{suffix}", key=tenant.key, **kwargs), 404, "NOT_FOUND")
    assert (await api.request("GET", f"{API}/webhooks", key=other.key)).json() == {"data": []}
    assert receiver.requests == []
    mine = await api.request("GET", f"{API}/webhooks/{hook['id']}", key=tenant.key)
    assert mine.status_code == 200 and mine.json()["data"]["name"] is None


async def test_roles_and_scopes(hooks_api: Api, receiver: Receiver) -> None:
    api = hooks_api
    tenant = await api.create_tenant()
    hook = await created(api, tenant, receiver.url())
    _, member = await member_key(api, tenant, "member")
    assert_error(await api.request("GET", f"{API}/webhooks", key=member), 403, "FORBIDDEN")
    assert_error(await api.request("POST", f"{API}/webhooks", key=member, json={"url": receiver.url()}), 403, "FORBIDDEN")
    assert_error(await api.request("GET", f"{API}/webhooks/{hook['id']}", key=member), 403, "FORBIDDEN")
    _, admin = await member_key(api, tenant, "admin")
    assert (await api.request("GET", f"{API}/webhooks/{hook['id']}", key=admin)).status_code == 200

    reader = (await create_key(api, tenant.key, scopes=["webhooks:read"]))["key"]
    assert (await api.request("GET", f"{API}/webhooks", key=reader)).status_code == 200
    assert_error(await api.request("POST", f"{API}/webhooks", key=reader, json={"url": receiver.url()}), 403, "insufficient_scope")
    assert_error(await api.request("POST", f"{API}/webhooks/{hook['id']}/test", key=reader), 403, "insufficient_scope")
    unrelated = (await create_key(api, tenant.key, scopes=["sandboxes:read"]))["key"]
    assert_error(await api.request("GET", f"{API}/webhooks", key=unrelated), 403, "insufficient_scope")
    assert_error(await api.request("GET", f"{API}/webhooks"), 401, "invalid_token")


async def test_a_tenant_has_a_bounded_number_of_webhooks(hooks_api: Api, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_service, "MAX_WEBHOOKS_PER_TENANT", 2)
    tenant, other = await hooks_api.create_tenant(), await hooks_api.create_tenant("Other")
    for _ in range(2):
        await created(hooks_api, tenant, receiver.url())
    assert_error(await create(hooks_api, tenant, url=receiver.url()), 409, "WEBHOOK_LIMIT_REACHED")
    await created(hooks_api, other, receiver.url())


# --- the platform's own events, from a real sandbox -----------------------------------

BROKEN = "broken-for-webhook-tests"


@pytest.fixture
def broken_template(runtime_host: None) -> Iterator[str]:
    """A template that claims to be built but has no root filesystem: its sandboxes end in error."""
    directory = TEMPLATE_CACHE / BROKEN
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps({"uid_base": 100000, "revision": BUILD_REVISION}))
    yield BROKEN
    shutil.rmtree(directory, ignore_errors=True)


async def test_sandbox_lifecycle_events_arrive_signed(runtime_api: Api, broken_template: str, tmp_path: Path) -> None:
    api = runtime_api
    async with https_receiver(tmp_path / "receiver") as receiver:
        api.platform.settings.allow_private_destinations = True
        api.platform.settings.ca_bundle = str(receiver.ca_path)
        tenant = await api.create_tenant()
        hook = await created(api, tenant, receiver.url(), events=[])
        good = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"name": "hooked"})
        assert good.status_code == 201, good.text
        sandbox_id = good.json()["data"]["id"]
        bad = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"template_id": broken_template})
        assert bad.status_code == 201 and bad.json()["data"]["status"] == "error", bad.text
        bad_id = bad.json()["data"]["id"]
        with trio.fail_after(60):
            while (await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)).json()["data"]["status"] != "running":
                await trio.sleep(0.2)
        deleted = await api.request("DELETE", f"{API}/sandboxes/{sandbox_id}", key=tenant.key)
        assert deleted.status_code == 200, deleted.text

        def seen() -> set[tuple[str, str]]:
            return {(r.json["type"], r.json["data"].get("sandbox_id") or r.json["data"].get("id")) for r in receiver.requests}

        wanted = {
            ("sandbox.created", sandbox_id), ("sandbox.ready", sandbox_id), ("sandbox.destroyed", sandbox_id),
            ("sandbox.created", bad_id), ("sandbox.error", bad_id),
        }
        await receiver.wait_for(lambda: wanted <= seen(), timeout=30)
    for received in receiver.requests:
        verify_signatures(hook["secret"], received)
        assert received.json["tenant_id"] == tenant.id
    assert {r.json["type"] for r in receiver.requests} <= {"sandbox.created", "sandbox.ready", "sandbox.error", "sandbox.destroyed"}
