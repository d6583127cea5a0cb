"""Every query of the egress package, over the tables of migration 0012.

Rows come out as frozen records: `SecretRecord` (the value still sealed),
`BindingRecord`, `PolicyRecord`, `RuleRecord` and `AuditRecord`. The vault rows are
written by the package's services (`vault`, `policies`); audit rows by `audit`,
which the egress proxy calls once per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.storage import Database, Transaction

SECRET_SCOPES = ("tenant", "workspace", "user", "external_user", "external_workspace")
SCOPE_COLUMN: dict[str, str | None] = {
    "tenant": None,
    "workspace": "workspace_id",
    "user": "owner_user_id",
    "external_user": "external_user_id",
    "external_workspace": "external_workspace_id",
}
"""The identity column each scope requires (and is keyed by)."""
IDENTITY_COLUMNS = ("workspace_id", "owner_user_id", "external_user_id", "external_workspace_id")


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """One vault secret; `value` is the AES-GCM envelope, never shown."""

    id: str
    tenant_id: str
    name: str
    type: str
    scope: str
    scope_key: str
    workspace_id: str | None
    owner_user_id: str | None
    external_user_id: str | None
    external_workspace_id: str | None
    allowed_hosts: list[str] = field(hash=False)
    value: bytes = field(repr=False)
    preview: str
    expires_at: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class BindingRecord:
    """A secret exposed to one resource (or, with `resource_id` None, its whole scope)."""

    id: str
    tenant_id: str
    secret_id: str
    resource_id: str | None
    resource_type: str | None
    resource_key: str
    exposure: str
    expose_as_env: str
    placeholder_token: str
    created_at: str


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    id: str
    tenant_id: str
    name: str | None
    resource_id: str | None
    resource_type: str | None
    resource_key: str
    mode: str
    default_action: str
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class RuleRecord:
    id: str
    tenant_id: str
    policy_id: str
    pattern: str
    kind: str
    method: str | None
    path_glob: str | None
    action: str
    warn_only: int
    priority: int
    created_at: str


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One request through the egress proxy (no secret value, ever)."""

    id: str
    tenant_id: str
    workspace_id: str | None
    owner_user_id: str | None
    external_user_id: str | None
    external_workspace_id: str | None
    resource_id: str | None
    resource_type: str | None
    host: str
    method: str | None
    path: str | None
    sni: str | None
    mode: str | None
    remote_addr: str | None
    action: str
    rejected_by: str | None
    status_code: int | None
    duration_ms: int | None
    bytes_in: int | None
    bytes_out: int | None
    error_message: str | None
    request_transforms: list[dict[str, Any]] = field(hash=False)
    response_transforms: list[dict[str, Any]] = field(hash=False)
    mcp: dict[str, Any] | None = field(hash=False)
    created_at: str


SECRETS = RowStore("egress_secrets", SecretRecord, json_columns=("allowed_hosts",))
BINDINGS = RowStore("egress_bindings", BindingRecord)
POLICIES = RowStore("egress_policies", PolicyRecord)
RULES = RowStore("egress_rules", RuleRecord)
AUDIT = RowStore("egress_audit", AuditRecord, json_columns=("request_transforms", "response_transforms", "mcp"))


# -- reads --------------------------------------------------------------------------


async def find_secret(db: Database, tenant_id: str, secret_id: str) -> SecretRecord | None:
    found = await SECRETS.where(db, [("id", secret_id), ("tenant_id", tenant_id)])
    return found[0] if found else None


async def list_secrets(db: Database, tenant_id: str, filters: list[tuple[str, Any]]) -> list[SecretRecord]:
    return await SECRETS.where(db, [("tenant_id", tenant_id), *filters])


async def find_binding(db: Database, tenant_id: str, binding_id: str) -> BindingRecord | None:
    found = await BINDINGS.where(db, [("id", binding_id), ("tenant_id", tenant_id)])
    return found[0] if found else None


async def list_bindings(db: Database, tenant_id: str, filters: list[tuple[str, Any]]) -> list[BindingRecord]:
    return await BINDINGS.where(db, [("tenant_id", tenant_id), *filters])


async def bindings_of_secret(db: Database, secret_id: str) -> list[BindingRecord]:
    return await BINDINGS.where(db, [("secret_id", secret_id)])


async def candidate_bindings(db: Database, tenant_id: str, resource_id: str) -> list[tuple[BindingRecord, SecretRecord]]:
    """The tenant's bindings to `resource_id` and its scope-wide ones, each with its secret
    (the caller keeps the scope-wide ones whose secret's scope holds the resource)."""
    rows = await db.fetch_all(
        "SELECT b.*, s.id AS s_id, s.tenant_id AS s_tenant_id, s.name AS s_name, s.type AS s_type,"
        " s.scope AS s_scope, s.scope_key AS s_scope_key, s.workspace_id AS s_workspace_id,"
        " s.owner_user_id AS s_owner_user_id, s.external_user_id AS s_external_user_id,"
        " s.external_workspace_id AS s_external_workspace_id, s.allowed_hosts AS s_allowed_hosts,"
        " s.value AS s_value, s.preview AS s_preview, s.expires_at AS s_expires_at,"
        " s.created_at AS s_created_at, s.updated_at AS s_updated_at"
        " FROM egress_bindings b JOIN egress_secrets s ON s.id = b.secret_id"
        " WHERE b.tenant_id = ? AND s.tenant_id = ? AND b.resource_key IN (?, '')"
        " ORDER BY b.created_at, b.id",
        (tenant_id, tenant_id, resource_id),
    )
    pairs = []
    for row in rows:
        secret = SECRETS.record({name.removeprefix("s_"): value for name, value in row.items() if name.startswith("s_")})
        pairs.append((BINDINGS.record(row), secret))
    return pairs


async def find_policy(db: Database, tenant_id: str, policy_id: str) -> PolicyRecord | None:
    found = await POLICIES.where(db, [("id", policy_id), ("tenant_id", tenant_id)])
    return found[0] if found else None


async def policy_for(db: Database, tenant_id: str, resource_key: str) -> PolicyRecord | None:
    found = await POLICIES.where(db, [("tenant_id", tenant_id), ("resource_key", resource_key)])
    return found[0] if found else None


async def list_policies(db: Database, tenant_id: str, filters: list[tuple[str, Any]]) -> list[PolicyRecord]:
    return await POLICIES.where(db, [("tenant_id", tenant_id), *filters], order_by="created_at, id")


async def find_rule(db: Database, tenant_id: str, rule_id: str) -> RuleRecord | None:
    found = await RULES.where(db, [("id", rule_id), ("tenant_id", tenant_id)])
    return found[0] if found else None


async def list_rules(db: Database, tenant_id: str, filters: list[tuple[str, Any]]) -> list[RuleRecord]:
    return await RULES.where(db, [("tenant_id", tenant_id), *filters], order_by="priority DESC, created_at, id")


# -- resources that went -----------------------------------------------------------


def forget_resource(tx: Transaction, resource_id: str) -> int:
    """Drop the bindings and the policy (with its rules) of a sandbox or computer that went."""
    policies = POLICIES.records(tx.fetch_all("SELECT * FROM egress_policies WHERE resource_id = ?", (resource_id,)))
    for policy in policies:
        tx.execute("DELETE FROM egress_rules WHERE policy_id = ?", (policy.id,))
    tx.execute("DELETE FROM egress_policies WHERE resource_id = ?", (resource_id,))
    return tx.execute("DELETE FROM egress_bindings WHERE resource_id = ?", (resource_id,)) + len(policies)


async def orphaned_resources(db: Database) -> list[str]:
    """Resources named by bindings or policies that no longer exist (gone while no node listened)."""
    named = await db.fetch_all(
        "SELECT resource_id AS id FROM egress_bindings WHERE resource_id IS NOT NULL"
        " UNION SELECT resource_id AS id FROM egress_policies WHERE resource_id IS NOT NULL"
    )
    alive = await db.fetch_all("SELECT id FROM sandboxes WHERE status != 'destroyed' UNION SELECT id FROM computers")
    living = {str(value) for row in alive for value in row.values()}
    return sorted({str(value) for row in named for value in row.values()} - living)
