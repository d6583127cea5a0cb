"""The egress queries on both backends (SQLite and PostgreSQL): vault, policies, audit."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from corral.actors import egress
from corral.actors.bus import EventBus
from corral.errors import ApiError
from corral.ids import new_uuid
from corral.models import parse
from corral.storage import Database, EventLog, SecretBox, utc_now_iso


@dataclass
class Services:
    db: Database
    secrets: SecretBox
    bus: EventBus


async def _tenant(db: Database) -> str:
    tenant_id = new_uuid()
    now = utc_now_iso()
    await db.insert("tenants", {"id": tenant_id, "name": "t", "created_at": now, "updated_at": now})
    return tenant_id


async def test_vault_policies_and_audit_on_both_backends(db: Database) -> None:
    services = Services(db, SecretBox(b"k" * 32), EventBus(EventLog(db)))
    tenant_id = await _tenant(db)
    caller = egress.Caller(tenant_id, is_admin=True)
    body = {"name": "k", "value": "value-0123456789-xyz", "type": "api_key", "scope": "tenant", "expose_as_env": "K"}
    secret, binding = await egress.create_secret(services, caller, parse(egress.NewSecret, body))
    assert binding is not None and binding.resource_id is None
    with pytest.raises(ApiError) as taken:
        await egress.create_secret(services, caller, parse(egress.NewSecret, body))
    assert taken.value.code == "SECRET_EXISTS"
    assert [s.id for s in await egress.secrets_of(services, tenant_id, {"scope": "tenant"})] == [secret.id]
    assert (await egress.get_secret(services, tenant_id, secret.id)).allowed_hosts == []

    default = await egress.tenant_default(db, tenant_id)
    assert await egress.tenant_default(db, tenant_id) == default
    assert (default.mode, default.default_action, default.resource_id) == ("audit_only", "allow", None)
    rule = await egress.create_rule(services, tenant_id, parse(egress.NewRule, {"policy_id": default.id, "pattern": "10.0.0.0/8", "kind": "cidr"}))
    policy, rules = await egress.effective_policy(db, tenant_id, new_uuid())
    assert policy.id == default.id and [r.id for r in rules] == [rule.id]

    entry = egress.AuditEntry(tenant_id=tenant_id, host="a.test", action="allow", request_transforms=[{"type": "placeholder"}])
    row = await egress.record_request(services, entry)
    rows, cursor = await egress.query_audit(db, tenant_id, egress.parse_query({"since": "1h"}))
    assert [r.id for r in rows] == [row.id] and cursor is None and rows[0].request_transforms == [{"type": "placeholder"}]
    assert (await egress.suggestions(db, tenant_id, None))[0]["count"] == 1
    assert await egress.prune(db) == 0

    sandbox_id = new_uuid()
    now = utc_now_iso()
    await db.insert("sandboxes", {
        "id": sandbox_id, "tenant_id": tenant_id, "owner_user_id": None, "name": "s", "slug": f"s-{sandbox_id[:8]}",
        "template_id": "default", "size": "small", "status": "running", "region": "local", "auto_stop": None,
        "workspace_id": "w", "project_id": "p", "external_workspace_id": None, "external_user_id": None,
        "external_project_id": None, "metadata": "{}", "error": None, "forked_from": None, "last_activity_at": None,
        "created_at": now, "updated_at": now,
    })
    context = await egress.load_context_for_instance(services, sandbox_id)
    assert context is not None and context.resource_type == "sandbox"
    assert [(s.placeholder, s.value) for s in context.secrets] == [(binding.placeholder_token, "value-0123456789-xyz")]

    await egress.delete_secret(services, caller, secret)
    assert await egress.bindings_of(services, tenant_id, {}) == []
