"""Policies (one per resource, plus the tenant default) and their allowlist rules.

The tenant default exists from the start (`audit_only` / `allow`): it is written the
first time anything asks for the tenant's policies, with `ON CONFLICT DO NOTHING` on
the (tenant, resource) index so two nodes cannot make two. A resource's policy is its
own, else the tenant default (`effective_policy`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from corral.errors import conflict, not_found, validation_error
from corral.ids import new_uuid
from corral.models import Unset
from corral.storage import Database, Transaction, utc_now_iso
from corral.storage.database import insert_sql

from .resources import require_resource
from .services import EgressServices
from .spec import NewPolicy, NewRule, PolicyChange, host_problem
from .store import (
    POLICIES,
    RULES,
    PolicyRecord,
    RuleRecord,
    find_policy,
    find_rule,
    list_policies,
    list_rules,
    policy_for,
)


def policy_public(policy: PolicyRecord) -> dict[str, Any]:
    return {
        "id": policy.id,
        "name": policy.name,
        "resource_id": policy.resource_id,
        "resource_type": policy.resource_type,
        "mode": policy.mode,
        "default_action": policy.default_action,
        "created_at": policy.created_at,
        "updated_at": policy.updated_at,
    }


def rule_public(rule: RuleRecord) -> dict[str, Any]:
    return {
        "id": rule.id,
        "policy_id": rule.policy_id,
        "pattern": rule.pattern,
        "kind": rule.kind,
        "method": rule.method,
        "path_glob": rule.path_glob,
        "action": rule.action,
        "warn_only": bool(rule.warn_only),
        "priority": rule.priority,
        "created_at": rule.created_at,
    }


async def tenant_default(db: Database, tenant_id: str) -> PolicyRecord:
    """The tenant's default policy, made on first use."""
    existing = await policy_for(db, tenant_id, "")
    if existing is not None:
        return existing
    now = utc_now_iso()
    draft = PolicyRecord(new_uuid(), tenant_id, "default", None, None, "", "audit_only", "allow", now, now)
    row = POLICIES.row(dataclasses.asdict(draft))
    await db.execute(insert_sql("egress_policies", row) + " ON CONFLICT (tenant_id, resource_key) DO NOTHING", tuple(row.values()))
    made = await policy_for(db, tenant_id, "")
    if made is None:  # the tenant is gone (its rows cascade)
        raise not_found("tenant not found")
    return made


async def create_policy(services: EgressServices, tenant_id: str, fields: NewPolicy) -> PolicyRecord:
    if fields.resource_id is None:
        await tenant_default(services.db, tenant_id)
        raise conflict("POLICY_EXISTS", "the tenant already has a default policy")
    if fields.resource_type is None:
        raise validation_error({"resource_type": "is required with resource_id"})
    await require_resource(services.db, tenant_id, fields.resource_type, fields.resource_id)
    now = utc_now_iso()
    policy = PolicyRecord(
        new_uuid(), tenant_id, fields.name, fields.resource_id, fields.resource_type, fields.resource_id,
        fields.mode, fields.default_action, now, now,
    )

    def work(tx: Transaction) -> None:
        if tx.fetch_value(
            "SELECT COUNT(*) FROM egress_policies WHERE tenant_id = ? AND resource_key = ?", (tenant_id, policy.resource_key)
        ):
            raise conflict("POLICY_EXISTS", "this resource already has a policy")
        POLICIES.insert(tx, policy)

    await services.db.transaction(work)
    return policy


async def policies_of(services: EgressServices, tenant_id: str, resource_id: str | None) -> list[PolicyRecord]:
    await tenant_default(services.db, tenant_id)
    return await list_policies(services.db, tenant_id, [("resource_id", resource_id)] if resource_id else [])


async def get_policy(services: EgressServices, tenant_id: str, policy_id: str) -> PolicyRecord:
    await tenant_default(services.db, tenant_id)
    policy = await find_policy(services.db, tenant_id, policy_id)
    if policy is None:
        raise not_found("policy not found")
    return policy


async def update_policy(services: EgressServices, policy: PolicyRecord, change: PolicyChange) -> PolicyRecord:
    values: dict[str, Any] = {"updated_at": utc_now_iso()}
    for name in ("mode", "default_action", "name"):
        value = getattr(change, name)
        if not isinstance(value, Unset):
            values[name] = value
    await POLICIES.update(services.db, policy.id, values)
    return POLICIES.replaced(policy, values)


def _pattern_problem(kind: str, pattern: str) -> str | None:
    if kind == "cidr":
        try:
            ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return "must be a CIDR block such as 10.0.0.0/8"
        return None
    if kind == "wildcard" and not pattern.startswith("*."):
        return "a wildcard pattern starts with *."
    if kind == "exact":
        try:
            ipaddress.ip_address(pattern)
            return None
        except ValueError:
            pass
        if pattern.startswith("*."):
            return "an exact pattern has no wildcard"
    return host_problem(pattern.lower())


async def create_rule(services: EgressServices, tenant_id: str, fields: NewRule) -> RuleRecord:
    policy = await find_policy(services.db, tenant_id, fields.policy_id)
    if policy is None:
        raise not_found("policy not found")
    problem = _pattern_problem(fields.kind, fields.pattern)
    if problem:
        raise validation_error({"pattern": problem})
    rule = RuleRecord(
        id=new_uuid(),
        tenant_id=tenant_id,
        policy_id=policy.id,
        pattern=fields.pattern.lower(),
        kind=fields.kind,
        method=fields.method.upper() if fields.method else None,
        path_glob=fields.path_glob,
        action=fields.action,
        warn_only=int(fields.warn_only),
        priority=fields.priority,
        created_at=utc_now_iso(),
    )
    await services.db.transaction(lambda tx: RULES.insert(tx, rule))
    return rule


async def rules_of(services: EgressServices, tenant_id: str, policy_id: str | None) -> list[RuleRecord]:
    return await list_rules(services.db, tenant_id, [("policy_id", policy_id)] if policy_id else [])


async def get_rule(services: EgressServices, tenant_id: str, rule_id: str) -> RuleRecord:
    rule = await find_rule(services.db, tenant_id, rule_id)
    if rule is None:
        raise not_found("rule not found")
    return rule


async def delete_rule(services: EgressServices, rule: RuleRecord) -> None:
    await services.db.transaction(lambda tx: RULES.delete(tx, rule.id))


async def effective_policy(db: Database, tenant_id: str, resource_id: str | None) -> tuple[PolicyRecord, list[RuleRecord]]:
    """The resource's own policy, else the tenant default, with its rules."""
    policy = await policy_for(db, tenant_id, resource_id) if resource_id else None
    if policy is None:
        policy = await tenant_default(db, tenant_id)
    return policy, await list_rules(db, tenant_id, [("policy_id", policy.id)])
