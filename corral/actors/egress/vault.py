"""The vault: secrets sealed at rest, and bindings that expose them as placeholders.

A secret's value is sealed with AES-256-GCM (`SecretBox`) bound to its tenant and id
(`associated_data(tenant, id, "egress-secret")`), so a value copied to another row or
tenant does not open. It leaves the vault only in `bound_secrets`, the egress proxy's
view, and never in a response, a log line or an audit row. Instances see a binding's
`placeholder_token` (`svc-tok-` and 32 random characters, stable for the binding) as
the env var it names (`placeholder_env`, which the sandbox and computer env merge into
every boot, exec and process).
"""

from __future__ import annotations

import secrets as random
import string
from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError, conflict, forbidden, not_found, validation_error
from corral.ids import new_uuid
from corral.models import Unset
from corral.storage import Database, Transaction, associated_data, parse_iso, utc_now, utc_now_iso

from .resources import Resource, in_scope, require_resource
from .services import EgressServices
from .spec import NewBinding, NewSecret, SecretChange
from .store import (
    BINDINGS,
    IDENTITY_COLUMNS,
    SCOPE_COLUMN,
    SECRETS,
    BindingRecord,
    SecretRecord,
    bindings_of_secret,
    candidate_bindings,
    find_binding,
    find_secret,
    list_bindings,
    list_secrets,
)
from .substitution import PLACEHOLDER_PREFIX, BoundSecret

_ALPHABET = string.ascii_letters + string.digits


def new_placeholder() -> str:
    return PLACEHOLDER_PREFIX + "".join(random.choice(_ALPHABET) for _ in range(32))


def preview(value: str) -> str:
    """First 6 and last 4 characters; a value too short to keep 6 hidden shows none of it."""
    return f"{value[:6]}...{value[-4:]}" if len(value) >= 16 else "..."


def _aad(tenant_id: str, secret_id: str) -> bytes:
    return associated_data(tenant_id, secret_id, "egress-secret")


def secret_public(secret: SecretRecord) -> dict[str, Any]:
    return {
        "id": secret.id,
        "name": secret.name,
        "type": secret.type,
        "scope": secret.scope,
        "workspace_id": secret.workspace_id,
        "owner_user_id": secret.owner_user_id,
        "external_user_id": secret.external_user_id,
        "external_workspace_id": secret.external_workspace_id,
        "allowed_hosts": secret.allowed_hosts,
        "preview": secret.preview,
        "expires_at": secret.expires_at,
        "created_at": secret.created_at,
        "updated_at": secret.updated_at,
    }


def binding_public(binding: BindingRecord) -> dict[str, Any]:
    return {
        "id": binding.id,
        "secret_id": binding.secret_id,
        "resource_id": binding.resource_id,
        "resource_type": binding.resource_type,
        "exposure": binding.exposure,
        "expose_as_env": binding.expose_as_env,
        "placeholder_token": binding.placeholder_token,
        "created_at": binding.created_at,
    }


@dataclass(frozen=True)
class Caller:
    """Who manages the vault: tenant-scoped secrets need a tenant owner or admin."""

    tenant_id: str
    is_admin: bool
    user_id: str | None = None


def _scope_key(fields: NewSecret) -> str:
    """The identity value of the scope; 422 when the scope's column is absent or another
    scope's identity rides along with the tenant scope."""
    column = SCOPE_COLUMN[fields.scope]
    if column is None:
        extra = [name for name in IDENTITY_COLUMNS if getattr(fields, name)]
        if extra:
            raise validation_error({name: "must not be set for scope tenant" for name in extra}, "scope and identity mismatch")
        return ""
    value = getattr(fields, column)
    if not value:
        raise validation_error({column: f"is required for scope {fields.scope}"}, "scope and identity mismatch")
    return str(value)


def require_role(caller: Caller, scope: str, owner_user_id: str | None) -> None:
    """Tenant-scoped secrets need an owner or admin; another user's own secrets too."""
    if caller.is_admin:
        return
    if scope == "tenant":
        raise forbidden("tenant-scoped secrets need a tenant owner or admin")
    if scope == "user" and owner_user_id != caller.user_id:
        raise forbidden("another user's secrets need a tenant owner or admin")


def _name_taken() -> ApiError:
    return conflict("SECRET_EXISTS", "a secret with this name already exists in this scope")


async def create_secret(
    services: EgressServices, caller: Caller, fields: NewSecret
) -> tuple[SecretRecord, BindingRecord | None]:
    """A new secret, and the scope-wide binding `expose_as_env` asks for."""
    scope_key = _scope_key(fields)
    require_role(caller, fields.scope, fields.owner_user_id)
    now = utc_now_iso()
    secret_id = new_uuid()
    secret = SecretRecord(
        id=secret_id,
        tenant_id=caller.tenant_id,
        name=fields.name,
        type=fields.type,
        scope=fields.scope,
        scope_key=scope_key,
        workspace_id=fields.workspace_id,
        owner_user_id=fields.owner_user_id,
        external_user_id=fields.external_user_id,
        external_workspace_id=fields.external_workspace_id,
        allowed_hosts=list(dict.fromkeys(fields.allowed_hosts or [])),
        value=services.secrets.encrypt_text(fields.value, _aad(caller.tenant_id, secret_id)),
        preview=preview(fields.value),
        expires_at=fields.expires_at,
        created_at=now,
        updated_at=now,
    )
    binding = None
    if fields.expose_as_env:
        binding = BindingRecord(
            id=new_uuid(),
            tenant_id=caller.tenant_id,
            secret_id=secret_id,
            resource_id=None,
            resource_type=None,
            resource_key="",
            exposure="env_var",
            expose_as_env=fields.expose_as_env,
            placeholder_token=new_placeholder(),
            created_at=now,
        )

    def work(tx: Transaction) -> None:
        taken = tx.fetch_value(
            "SELECT COUNT(*) FROM egress_secrets WHERE tenant_id = ? AND scope = ? AND scope_key = ? AND name = ?",
            (caller.tenant_id, fields.scope, scope_key, fields.name),
        )
        if taken:
            raise _name_taken()
        SECRETS.insert(tx, secret)
        if binding is not None:
            BINDINGS.insert(tx, binding)

    await services.db.transaction(work)
    return secret, binding


async def get_secret(services: EgressServices, tenant_id: str, secret_id: str) -> SecretRecord:
    secret = await find_secret(services.db, tenant_id, secret_id)
    if secret is None:
        raise not_found("secret not found")
    return secret


async def secrets_of(services: EgressServices, tenant_id: str, filters: dict[str, str | None]) -> list[SecretRecord]:
    return await list_secrets(services.db, tenant_id, [(name, value) for name, value in filters.items() if value])


async def update_secret(services: EgressServices, caller: Caller, secret: SecretRecord, change: SecretChange) -> SecretRecord:
    """Re-seal a new value (bindings and placeholders stay) or change expiry and hosts."""
    require_role(caller, secret.scope, secret.owner_user_id)
    values: dict[str, Any] = {"updated_at": utc_now_iso()}
    if not isinstance(change.value, Unset):
        values["value"] = services.secrets.encrypt_text(change.value, _aad(secret.tenant_id, secret.id))
        values["preview"] = preview(change.value)
    if not isinstance(change.expires_at, Unset):
        values["expires_at"] = change.expires_at
    if not isinstance(change.allowed_hosts, Unset):
        values["allowed_hosts"] = list(dict.fromkeys(change.allowed_hosts))
    await SECRETS.update(services.db, secret.id, values)
    return SECRETS.replaced(secret, values)


async def delete_secret(services: EgressServices, caller: Caller, secret: SecretRecord) -> None:
    require_role(caller, secret.scope, secret.owner_user_id)

    def work(tx: Transaction) -> None:
        tx.execute("DELETE FROM egress_bindings WHERE secret_id = ?", (secret.id,))
        SECRETS.delete(tx, secret.id)

    await services.db.transaction(work)


# -- bindings -----------------------------------------------------------------------


async def create_binding(services: EgressServices, caller: Caller, fields: NewBinding) -> BindingRecord:
    secret = await get_secret(services, caller.tenant_id, fields.secret_id)
    resource = await require_resource(services.db, caller.tenant_id, fields.resource_type, fields.resource_id)
    if not in_scope(secret.scope, secret.scope_key, resource):
        raise validation_error({"resource_id": f"is outside the secret's {secret.scope} scope"})
    binding = BindingRecord(
        id=new_uuid(),
        tenant_id=caller.tenant_id,
        secret_id=secret.id,
        resource_id=resource.id,
        resource_type=fields.resource_type,
        resource_key=resource.id,
        exposure=fields.exposure,
        expose_as_env=fields.expose_as_env,
        placeholder_token=new_placeholder(),
        created_at=utc_now_iso(),
    )

    def work(tx: Transaction) -> None:
        taken = tx.fetch_value(
            "SELECT COUNT(*) FROM egress_bindings WHERE secret_id = ? AND resource_key = ? AND expose_as_env = ?",
            (secret.id, resource.id, fields.expose_as_env),
        )
        if taken:
            raise conflict("BINDING_EXISTS", "this secret is already bound to the resource under this name")
        BINDINGS.insert(tx, binding)

    await services.db.transaction(work)
    return binding


async def get_binding(services: EgressServices, tenant_id: str, binding_id: str) -> BindingRecord:
    binding = await find_binding(services.db, tenant_id, binding_id)
    if binding is None:
        raise not_found("binding not found")
    return binding


async def bindings_of(services: EgressServices, tenant_id: str, filters: dict[str, str | None]) -> list[BindingRecord]:
    return await list_bindings(services.db, tenant_id, [(name, value) for name, value in filters.items() if value])


async def delete_binding(services: EgressServices, binding: BindingRecord) -> None:
    await services.db.transaction(lambda tx: BINDINGS.delete(tx, binding.id))


async def secret_bindings(services: EgressServices, secret: SecretRecord) -> list[BindingRecord]:
    return await bindings_of_secret(services.db, secret.id)


# -- what instances and the proxy see -------------------------------------------------


async def resource_bindings(db: Database, resource: Resource) -> list[tuple[BindingRecord, SecretRecord]]:
    """The bindings that apply to `resource`: its own, and the scope-wide ones whose
    secret's scope holds it (its own win for an env name both expose)."""
    pairs = await candidate_bindings(db, resource.tenant_id, resource.id)
    chosen: dict[str, tuple[BindingRecord, SecretRecord]] = {}
    for binding, secret in sorted(pairs, key=lambda pair: pair[0].resource_id is not None):
        if binding.resource_id is None and not in_scope(secret.scope, secret.scope_key, resource):
            continue
        chosen[binding.expose_as_env] = (binding, secret)
    return list(chosen.values())


async def placeholder_env(db: Database, resource: Resource) -> dict[str, str]:
    """`{expose_as_env: placeholder_token}` for every binding of `resource` (no values)."""
    return {binding.expose_as_env: binding.placeholder_token for binding, _ in await resource_bindings(db, resource)}


def _expired(secret: SecretRecord) -> bool:
    if secret.expires_at is None:
        return False
    try:
        return parse_iso(secret.expires_at) <= utc_now()
    except ValueError:
        return False


async def bound_secrets(services: EgressServices, resource: Resource) -> list[BoundSecret]:
    """The plaintext secrets `resource` may use through the proxy (expired ones left out).

    Every placeholder of every binding that applies is included, including those
    shadowed in the env by a resource's own binding of the same name."""
    pairs = await candidate_bindings(services.db, resource.tenant_id, resource.id)
    bound = []
    for binding, secret in pairs:
        if binding.resource_id is None and not in_scope(secret.scope, secret.scope_key, resource):
            continue
        if _expired(secret):
            continue
        value = services.secrets.decrypt_text(secret.value, _aad(secret.tenant_id, secret.id))
        bound.append(BoundSecret(secret.id, binding.placeholder_token, value, tuple(secret.allowed_hosts)))
    return bound
