"""The /egress routes over HTTP: secrets, bindings, policies, allowlist rules, audit.

Resources are sandbox rows written straight into the store (the vault only reads
their identity columns); the instance env of a real sandbox is covered in
test_egress_env.py. Every response and log line is checked for the secret's value.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from corral.actors import egress
from corral.ids import new_uuid
from corral.storage import utc_now_iso
from tests.support import API, Api, Tenant, assert_error, member_key

VALUE = "sk-live-0123456789abcdefSECRET"
PLACEHOLDER = re.compile(r"^svc-tok-[A-Za-z0-9]{32}$")
SECRET_FIELDS = {
    "id", "name", "type", "scope", "workspace_id", "owner_user_id", "external_user_id", "external_workspace_id",
    "allowed_hosts", "preview", "expires_at", "created_at", "updated_at",
}
BINDING_FIELDS = {"id", "secret_id", "resource_id", "resource_type", "exposure", "expose_as_env", "placeholder_token", "created_at"}
POLICY_FIELDS = {"id", "name", "resource_id", "resource_type", "mode", "default_action", "created_at", "updated_at"}


@pytest.fixture(autouse=True)
def no_value_in_logs(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.DEBUG)
    yield
    assert VALUE not in caplog.text


async def sandbox_row(api: Api, tenant: Tenant, **identity: Any) -> str:
    sandbox_id = new_uuid()
    now = utc_now_iso()
    await api.platform.db.insert(
        "sandboxes",
        {
            "id": sandbox_id, "tenant_id": tenant.id, "owner_user_id": identity.get("owner_user_id", tenant.owner_id),
            "name": "vaulted", "slug": f"vaulted-{sandbox_id[:8]}", "template_id": "default", "size": "small",
            "status": "stopped", "region": "local", "auto_stop": None, "workspace_id": tenant.workspace_id,
            "project_id": tenant.project_id, "external_workspace_id": identity.get("external_workspace_id"),
            "external_user_id": identity.get("external_user_id"), "external_project_id": None, "metadata": "{}",
            "error": None, "forked_from": None, "last_activity_at": None, "created_at": now, "updated_at": now,
        },
    )
    return sandbox_id


async def call(api: Api, tenant: Tenant, method: str, path: str, **kwargs: Any) -> Any:
    response = await api.request(method, f"{API}/egress{path}", key=tenant.key, **kwargs)
    assert VALUE not in response.text
    return response


async def new_secret(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body = {"name": "stripe", "value": VALUE, "type": "api_key", "scope": "tenant", **body}
    response = await call(api, tenant, "POST", "/secrets", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_secret_lifecycle_never_shows_the_value(api: Api, tenant: Tenant) -> None:
    created = await new_secret(api, tenant, allowed_hosts=["api.stripe.com", "*.stripe.com"])
    secret = created["data"]
    assert set(secret) == SECRET_FIELDS and created["binding"] is None
    assert secret["preview"] == "sk-liv...CRET" and secret["scope"] == "tenant"
    assert secret["allowed_hosts"] == ["api.stripe.com", "*.stripe.com"]
    stored = await api.platform.db.fetch_value("SELECT value FROM egress_secrets WHERE id = ?", (secret["id"],))
    assert VALUE.encode() not in bytes(stored)

    listed = await call(api, tenant, "GET", "/secrets")
    assert [s["id"] for s in listed.json()["data"]] == [secret["id"]]
    assert (await call(api, tenant, "GET", "/secrets?scope=user")).json()["data"] == []
    got = await call(api, tenant, "GET", f"/secrets/{secret['id']}")
    assert got.json()["data"] == secret

    patched = await call(api, tenant, "PATCH", f"/secrets/{secret['id']}", json={"value": "rotated-value-0000000000", "expires_at": "2030-01-01T00:00:00Z"})
    assert patched.status_code == 200, patched.text
    assert patched.json()["data"]["preview"] == "rotate...0000"
    assert patched.json()["data"]["expires_at"] == "2030-01-01T00:00:00Z"

    assert (await call(api, tenant, "DELETE", f"/secrets/{secret['id']}")).status_code == 204
    assert_error(await call(api, tenant, "GET", f"/secrets/{secret['id']}"), 404, "NOT_FOUND")


async def test_secret_creation_errors(api: Api, tenant: Tenant) -> None:
    base = {"name": "k", "value": VALUE, "type": "api_key", "scope": "tenant"}
    assert_error(await api.request("POST", f"{API}/egress/secrets", key=tenant.key, content=b"{nope"), 400, "INVALID_BODY")
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "scope": "galaxy"}), 400, "INVALID_PARAM")
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "expose_as_env": "lower-case"}), 400, "INVALID_PARAM")
    assert_error(await call(api, tenant, "POST", "/secrets", json={k: v for k, v in base.items() if k != "value"}), 400, "MISSING_PARAM")
    error = assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "scope": "user"}), 422, "VALIDATION_ERROR")
    assert "owner_user_id" in error["details"]
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "scope": "workspace"}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "workspace_id": tenant.workspace_id}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "allowed_hosts": ["http://x"]}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/secrets", json={**base, "type": "password"}), 422, "VALIDATION_ERROR")
    await new_secret(api, tenant, name="k")
    assert_error(await call(api, tenant, "POST", "/secrets", json=base), 409, "SECRET_EXISTS")
    # The same name in another scope is another secret.
    await new_secret(api, tenant, name="k", scope="user", owner_user_id=tenant.owner_id)


async def test_tenant_scoped_secrets_need_an_admin(api: Api, tenant: Tenant) -> None:
    user_id, key = await member_key(api, tenant, "member")
    body = {"name": "k", "value": VALUE, "type": "api_key", "scope": "tenant"}
    response = await api.request("POST", f"{API}/egress/secrets", key=key, json=body)
    assert_error(response, 403, "FORBIDDEN")
    response = await api.request(
        "POST", f"{API}/egress/secrets", key=key, json={**body, "scope": "user", "owner_user_id": user_id}
    )
    assert response.status_code == 201, response.text
    response = await api.request(
        "POST", f"{API}/egress/secrets", key=key, json={**body, "scope": "user", "owner_user_id": tenant.owner_id}
    )
    assert_error(response, 403, "FORBIDDEN")
    owners = (await new_secret(api, tenant, name="owners", scope="user", owner_user_id=tenant.owner_id))["data"]
    response = await api.request("PATCH", f"{API}/egress/secrets/{owners['id']}", key=key, json={"value": "x" * 20})
    assert_error(response, 403, "FORBIDDEN")
    admin_secret = (await new_secret(api, tenant))["data"]
    response = await api.request("DELETE", f"{API}/egress/secrets/{admin_secret['id']}", key=key)
    assert_error(response, 403, "FORBIDDEN")


async def test_bindings_and_placeholder_env(api: Api, tenant: Tenant) -> None:
    sandbox_id = await sandbox_row(api, tenant, external_user_id="ext-1")
    other_user_sandbox = await sandbox_row(api, tenant, external_user_id="ext-2")
    created = await new_secret(api, tenant, expose_as_env="STRIPE_KEY")
    scope_wide = created["binding"]
    assert set(scope_wide) == BINDING_FIELDS and scope_wide["resource_id"] is None
    assert PLACEHOLDER.match(scope_wide["placeholder_token"]) and scope_wide["exposure"] == "env_var"

    ext = (await new_secret(api, tenant, name="ext", scope="external_user", external_user_id="ext-1"))["data"]
    response = await call(api, tenant, "POST", "/bindings", json={
        "secret_id": ext["id"], "resource_id": sandbox_id, "resource_type": "sandbox", "exposure": "env_var", "expose_as_env": "EXT_KEY",
    })
    assert response.status_code == 201, response.text
    binding = response.json()["data"]
    assert set(binding) == BINDING_FIELDS and binding["resource_id"] == sandbox_id
    assert PLACEHOLDER.match(binding["placeholder_token"]) and binding["placeholder_token"] != scope_wide["placeholder_token"]

    # Outside the secret's scope, a duplicate, unknown ids, a bad env name.
    body = {"secret_id": ext["id"], "resource_id": other_user_sandbox, "resource_type": "sandbox", "expose_as_env": "EXT_KEY"}
    assert_error(await call(api, tenant, "POST", "/bindings", json=body), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/bindings", json={**body, "resource_id": sandbox_id}), 409, "BINDING_EXISTS")
    assert_error(await call(api, tenant, "POST", "/bindings", json={**body, "resource_id": new_uuid()}), 404, "NOT_FOUND")
    assert_error(await call(api, tenant, "POST", "/bindings", json={**body, "secret_id": new_uuid()}), 404, "NOT_FOUND")
    assert_error(await call(api, tenant, "POST", "/bindings", json={**body, "expose_as_env": "9X"}), 400, "INVALID_PARAM")
    assert_error(await call(api, tenant, "POST", "/bindings", json={**body, "resource_type": "vm"}), 422, "VALIDATION_ERROR")

    listed = (await call(api, tenant, "GET", f"/bindings?resource_id={sandbox_id}")).json()["data"]
    assert [b["id"] for b in listed] == [binding["id"]]
    assert len((await call(api, tenant, "GET", "/bindings")).json()["data"]) == 2

    record = await egress.find_resource(api.platform.db, tenant.id, "sandbox", sandbox_id)
    assert record is not None
    env = await egress.placeholder_env(api.platform.db, record)
    assert env == {"STRIPE_KEY": scope_wide["placeholder_token"], "EXT_KEY": binding["placeholder_token"]}
    other = await egress.find_resource(api.platform.db, tenant.id, "sandbox", other_user_sandbox)
    assert other is not None
    assert await egress.placeholder_env(api.platform.db, other) == {"STRIPE_KEY": scope_wide["placeholder_token"]}

    # A new value keeps the placeholder, and the proxy's view has the new value.
    await call(api, tenant, "PATCH", f"/secrets/{ext['id']}", json={"value": "second-value-0123456789"})
    assert await egress.placeholder_env(api.platform.db, record) == env
    bound = {s.placeholder: s.value for s in await egress.bound_secrets(api.platform, record)}
    assert bound == {scope_wide["placeholder_token"]: VALUE, binding["placeholder_token"]: "second-value-0123456789"}

    assert (await call(api, tenant, "DELETE", f"/bindings/{binding['id']}")).status_code == 204
    assert_error(await call(api, tenant, "DELETE", f"/bindings/{binding['id']}"), 404, "NOT_FOUND")
    assert await egress.placeholder_env(api.platform.db, record) == {"STRIPE_KEY": scope_wide["placeholder_token"]}


async def test_policies_and_rules(api: Api, tenant: Tenant) -> None:
    listed = (await call(api, tenant, "GET", "/policies")).json()["data"]
    assert len(listed) == 1
    default = listed[0]
    assert set(default) == POLICY_FIELDS
    assert (default["resource_id"], default["mode"], default["default_action"]) == (None, "audit_only", "allow")
    assert_error(await call(api, tenant, "POST", "/policies", json={"mode": "enforce"}), 409, "POLICY_EXISTS")

    sandbox_id = await sandbox_row(api, tenant)
    body = {"resource_id": sandbox_id, "resource_type": "sandbox", "mode": "enforce", "default_action": "deny", "name": "strict"}
    response = await call(api, tenant, "POST", "/policies", json=body)
    assert response.status_code == 201, response.text
    policy = response.json()["data"]
    assert (policy["resource_id"], policy["mode"], policy["default_action"], policy["name"]) == (sandbox_id, "enforce", "deny", "strict")
    assert_error(await call(api, tenant, "POST", "/policies", json=body), 409, "POLICY_EXISTS")
    assert_error(await call(api, tenant, "POST", "/policies", json={**body, "resource_id": new_uuid()}), 404, "NOT_FOUND")
    assert_error(await call(api, tenant, "POST", "/policies", json={**body, "mode": "strict"}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/policies", json={}), 400, "MISSING_PARAM")
    assert [p["id"] for p in (await call(api, tenant, "GET", f"/policies?resource_id={sandbox_id}")).json()["data"]] == [policy["id"]]
    assert (await call(api, tenant, "GET", f"/policies/{policy['id']}")).json()["data"] == policy

    patched = await call(api, tenant, "PATCH", f"/policies/{default['id']}", json={"mode": "enforce", "default_action": "deny"})
    assert (patched.json()["data"]["mode"], patched.json()["data"]["default_action"]) == ("enforce", "deny")
    assert_error(await call(api, tenant, "PATCH", f"/policies/{default['id']}", json={"mode": "x"}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "PATCH", f"/policies/{new_uuid()}", json={"mode": "enforce"}), 404, "NOT_FOUND")

    rule_body = {"policy_id": policy["id"], "pattern": "api.stripe.com", "kind": "exact"}
    response = await call(api, tenant, "POST", "/allowlist", json=rule_body)
    assert response.status_code == 201, response.text
    rule = response.json()["data"]
    assert rule["action"] == "allow" and rule["warn_only"] is False and rule["priority"] == 100
    response = await call(api, tenant, "POST", "/allowlist", json={
        **rule_body, "pattern": "*.evil.test", "kind": "wildcard", "action": "deny", "priority": 300, "method": "post", "path_glob": "/v1/*",
    })
    assert response.status_code == 201, response.text
    assert response.json()["data"]["method"] == "POST"
    for bad in ({"kind": "cidr", "pattern": "not-a-net"}, {"kind": "wildcard", "pattern": "evil.test"}, {"kind": "glob"}, {"action": "maybe"}):
        assert_error(await call(api, tenant, "POST", "/allowlist", json={**rule_body, **bad}), 422, "VALIDATION_ERROR")
    assert_error(await call(api, tenant, "POST", "/allowlist", json={**rule_body, "policy_id": new_uuid()}), 404, "NOT_FOUND")
    rules = (await call(api, tenant, "GET", f"/allowlist?policy_id={policy['id']}")).json()["data"]
    assert [r["pattern"] for r in rules] == ["*.evil.test", "api.stripe.com"]
    assert (await call(api, tenant, "GET", f"/allowlist?policy_id={default['id']}")).json()["data"] == []

    effective, effective_rules = await egress.effective_policy(api.platform.db, tenant.id, sandbox_id)
    assert effective.id == policy["id"] and len(effective_rules) == 2
    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None
    assert egress.evaluate(context, egress.Request("api.stripe.com", "GET", "/"), []).allowed
    assert egress.evaluate(context, egress.Request("other.test", "GET", "/"), []).rejected_by == "default_action"

    assert (await call(api, tenant, "DELETE", f"/allowlist/{rule['id']}")).status_code == 204
    assert_error(await call(api, tenant, "DELETE", f"/allowlist/{rule['id']}"), 404, "NOT_FOUND")


async def _record(api: Api, tenant: Tenant, host: str, action: str = "allow", **fields: Any) -> egress.AuditRecord:
    entry = egress.AuditEntry(tenant_id=tenant.id, host=host, action=action, method="GET", path="/", **fields)
    return await egress.record_request(api.platform, entry)


async def test_audit_query_and_suggestions(api: Api, tenant: Tenant) -> None:
    sandbox_id = await sandbox_row(api, tenant)
    with api.platform.bus.subscribe(tenant_id=tenant.id, types=[egress.EVENT_TYPE]) as live:
        first = await _record(api, tenant, "api.stripe.com", resource_id=sandbox_id, resource_type="sandbox",
                              request_transforms=[{"type": "placeholder", "header": "authorization", "secret_id": "s"}])
        event = await live.receive()
        assert event.data["id"] == first.id and event.type == "egress.audit"
    await _record(api, tenant, "api.stripe.com", resource_id=sandbox_id, resource_type="sandbox")
    await _record(api, tenant, "evil.test", "reject", rejected_by="default_action", external_user_id="ext-9")

    rows = (await call(api, tenant, "GET", "/audit")).json()
    assert [r["host"] for r in rows["data"]] == ["evil.test", "api.stripe.com", "api.stripe.com"]
    assert rows["next_cursor"] is None
    assert rows["data"][-1]["request_transforms"] == [{"type": "placeholder", "header": "authorization", "secret_id": "s"}]
    page = (await call(api, tenant, "GET", "/audit?limit=2")).json()
    assert len(page["data"]) == 2 and page["next_cursor"] == page["data"][1]["id"]
    rest = (await call(api, tenant, "GET", f"/audit?limit=2&cursor={page['next_cursor']}")).json()
    assert [r["id"] for r in rest["data"]] == [first.id] and rest["next_cursor"] is None
    assert len((await call(api, tenant, "GET", "/audit?action=reject")).json()["data"]) == 1
    assert len((await call(api, tenant, "GET", f"/audit?resource_id={sandbox_id}")).json()["data"]) == 2
    assert len((await call(api, tenant, "GET", "/audit?host=API.stripe.com")).json()["data"]) == 2
    assert len((await call(api, tenant, "GET", "/audit?external_user_id=ext-9")).json()["data"]) == 1
    assert len((await call(api, tenant, "GET", "/audit?since=30m")).json()["data"]) == 3
    assert len((await call(api, tenant, "GET", "/audit?since=1h&until=2000-01-01T00:00:00Z")).json()["data"]) == 0
    assert len((await call(api, tenant, "GET", "/audit?since=7d&until=2999-01-01T00:00:00Z")).json()["data"]) == 3
    for bad in ("limit=0", "limit=1001", "limit=x", "since=yesterday", "until=5y", "action=maybe"):
        assert_error(await call(api, tenant, "GET", f"/audit?{bad}"), 422, "VALIDATION_ERROR")
    assert (await call(api, tenant, "GET", "/audit?limit=1000")).status_code == 200

    one = await call(api, tenant, "GET", f"/audit/{first.id}")
    assert one.json()["data"]["id"] == first.id and one.json()["data"]["tenant_id"] == tenant.id
    assert_error(await call(api, tenant, "GET", f"/audit/{new_uuid()}"), 404, "NOT_FOUND")

    suggestions = (await call(api, tenant, "GET", "/audit/suggestions")).json()["data"]
    assert [(s["host"], s["count"], s["action"]) for s in suggestions] == [("api.stripe.com", 2, "allow"), ("evil.test", 1, "reject")]
    assert set(suggestions[0]) == {"host", "count", "last_seen_at", "action"}
    scoped = (await call(api, tenant, "GET", f"/audit/suggestions?resource_id={sandbox_id}")).json()["data"]
    assert [s["host"] for s in scoped] == ["api.stripe.com"]

    old = "2020-01-01T00:00:00.000000Z"
    await api.platform.db.execute("UPDATE egress_audit SET created_at = ? WHERE id = ?", (old, first.id))
    assert await egress.prune(api.platform.db) == 1
    assert len((await call(api, tenant, "GET", "/audit")).json()["data"]) == 2


async def test_another_tenant_gets_404_everywhere(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    sandbox_id = await sandbox_row(api, tenant)
    created = await new_secret(api, tenant, expose_as_env="KEY")
    secret, scope_wide = created["data"], created["binding"]
    binding = (await call(api, tenant, "POST", "/bindings", json={
        "secret_id": secret["id"], "resource_id": sandbox_id, "resource_type": "sandbox", "expose_as_env": "OWN",
    })).json()["data"]
    policy = (await call(api, tenant, "POST", "/policies", json={"resource_id": sandbox_id, "resource_type": "sandbox", "mode": "enforce"})).json()["data"]
    rule = (await call(api, tenant, "POST", "/allowlist", json={"policy_id": policy["id"], "pattern": "a.test", "kind": "exact"})).json()["data"]
    row = await _record(api, tenant, "a.test")

    for method, path, body in [
        ("GET", f"/secrets/{secret['id']}", None),
        ("PATCH", f"/secrets/{secret['id']}", {"value": "stolen-0000000000000"}),
        ("DELETE", f"/secrets/{secret['id']}", None),
        ("DELETE", f"/bindings/{binding['id']}", None),
        ("DELETE", f"/bindings/{scope_wide['id']}", None),
        ("POST", "/bindings", {"secret_id": secret["id"], "resource_id": sandbox_id, "resource_type": "sandbox", "expose_as_env": "X"}),
        ("GET", f"/policies/{policy['id']}", None),
        ("PATCH", f"/policies/{policy['id']}", {"mode": "audit_only"}),
        ("POST", "/policies", {"resource_id": sandbox_id, "resource_type": "sandbox", "mode": "enforce"}),
        ("POST", "/allowlist", {"policy_id": policy["id"], "pattern": "b.test", "kind": "exact"}),
        ("DELETE", f"/allowlist/{rule['id']}", None),
        ("GET", f"/audit/{row.id}", None),
    ]:
        response = await call(api, other_tenant, method, path, json=body) if body is not None else await call(api, other_tenant, method, path)
        assert_error(response, 404, "NOT_FOUND")
    assert (await call(api, other_tenant, "GET", "/secrets")).json()["data"] == []
    assert (await call(api, other_tenant, "GET", "/bindings")).json()["data"] == []
    assert (await call(api, other_tenant, "GET", f"/allowlist?policy_id={policy['id']}")).json()["data"] == []
    assert (await call(api, other_tenant, "GET", "/audit")).json()["data"] == []
    assert (await call(api, other_tenant, "GET", "/audit/suggestions")).json()["data"] == []
    others = (await call(api, other_tenant, "GET", "/policies")).json()["data"]
    assert len(others) == 1 and others[0]["id"] != policy["id"]
    # The other tenant's resources never see this tenant's scope-wide placeholder.
    foreign = await sandbox_row(api, other_tenant)
    record = await egress.find_resource(api.platform.db, other_tenant.id, "sandbox", foreign)
    assert record is not None
    assert await egress.placeholder_env(api.platform.db, record) == {}
    assert await egress.bound_secrets(api.platform, record) == []


async def test_scopes_are_enforced(api: Api, tenant: Tenant) -> None:
    from tests.support import create_key

    reader = await create_key(api, tenant.key, scopes=["egress:read"])
    response = await api.request("GET", f"{API}/egress/secrets", key=reader["key"])
    assert response.status_code == 200
    response = await api.request(
        "POST", f"{API}/egress/secrets", key=reader["key"], json={"name": "k", "value": VALUE, "type": "api_key", "scope": "tenant"}
    )
    assert_error(response, 403, "insufficient_scope")
    none = await create_key(api, tenant.key, scopes=["sandboxes:read"])
    assert_error(await api.request("GET", f"{API}/egress/audit", key=none["key"]), 403, "insufficient_scope")


async def test_egress_endpoints_allow_300_requests_a_minute_per_key(api: Api, tenant: Tenant) -> None:
    first = await api.request("GET", f"{API}/egress/policies", key=tenant.key)
    assert first.headers["X-RateLimit-Limit"] == "300"
    for _ in range(299):
        response = await api.request("GET", f"{API}/egress/policies", key=tenant.key)
    limited = await api.request("GET", f"{API}/egress/policies", key=tenant.key)
    if limited.headers["X-RateLimit-Reset"] == first.headers["X-RateLimit-Reset"]:  # the same minute's window
        assert response.status_code == 200 and response.headers["X-RateLimit-Remaining"] == "0"
        assert_error(limited, 429, "RATE_LIMITED")
    # Other endpoints keep the key's own bucket.
    other = await api.request("GET", f"{API}/webhooks", key=tenant.key)
    assert other.status_code == 200 and other.headers["X-RateLimit-Limit"] != "300"


async def test_the_proxy_flow_substitutes_scrubs_and_audits(api: Api, tenant: Tenant, other_tenant: Tenant) -> None:
    """What the egress proxy does for one request, through its interface (proxy_api)."""
    sandbox_id = await sandbox_row(api, tenant)
    created = await new_secret(api, tenant, expose_as_env="STRIPE_KEY", allowed_hosts=["api.stripe.com"])
    token = created["binding"]["placeholder_token"]
    foreign = await new_secret(api, other_tenant, expose_as_env="STRIPE_KEY")
    foreign_token = foreign["binding"]["placeholder_token"]

    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None and context.policy.mode == "audit_only"
    headers = [("Authorization", f"Bearer {token}"), ("X-Other", foreign_token)]
    verdict = egress.evaluate(context, egress.Request("api.stripe.com", "POST", "/v1/charges"), headers)
    assert verdict.allowed and verdict.rejected_by is None
    assert verdict.headers == [("Authorization", f"Bearer {VALUE}"), ("X-Other", foreign_token)]  # another tenant's: never
    scrubber = verdict.scrubber()
    echoed = scrubber.feed(f'{{"key": "{VALUE}"}}'.encode()) + scrubber.flush()
    assert echoed == f'{{"key": "{token}"}}'.encode()
    row = await egress.record_request(api.platform, verdict.audit_entry(context, status_code=200, duration_ms=12))
    assert row.request_transforms == [{"type": "placeholder", "header": "authorization", "secret_id": created["data"]["id"]}]

    # Towards a host outside allowed_hosts the placeholder stays; enforce rejects it.
    elsewhere = egress.evaluate(context, egress.Request("evil.test", "GET", "/"), headers)
    assert elsewhere.allowed and elsewhere.rejected_by == "secret_host" and elsewhere.headers == headers
    default = (await call(api, tenant, "GET", "/policies")).json()["data"][0]
    await call(api, tenant, "PATCH", f"/policies/{default['id']}", json={"mode": "enforce"})
    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None
    refused = egress.evaluate(context, egress.Request("evil.test", "GET", "/"), headers)
    assert not refused.allowed and refused.rejected_by == "secret_host" and refused.headers == headers
    row = await egress.record_request(api.platform, refused.audit_entry(context, status_code=403))
    assert (row.action, row.rejected_by, row.mode, row.request_transforms) == ("reject", "secret_host", "enforce", [])
    body = egress.denied_body("req_1")
    assert b'"EGRESS_DENIED"' in body and b'"req_1"' in body

    listed = (await call(api, tenant, "GET", f"/audit?resource_id={sandbox_id}")).json()["data"]
    assert [r["action"] for r in listed] == ["reject", "allow"]
    assert all(r["workspace_id"] == tenant.workspace_id and r["resource_type"] == "sandbox" for r in listed)
    assert await egress.load_context(api.platform, "sandbox", new_uuid()) is None
