"""Agent runtime profiles (contract §14): what an agent runs with, per tenant or workspace.

A profile names a provider, an optional model and command (optional for every
provider, `custom` included: a run may give its own, contract §14), the kinds of
target it applies to (`sandbox`, `computer`), env variables and vault secrets. Its
env values are sealed (`SecretBox`, tenant and profile id as associated data) and
never returned: responses list `env_keys` only. Secrets are referenced by id;
applying the profile to a resource binds each one to it, so the resource sees an
opaque `svc-tok-` placeholder that the egress proxy substitutes (the vault's
bindings), never the value.

Defaults: a profile created or patched with `is_default: true` becomes the default
for each kind it applies to in its scope (its workspace, or the tenant when it has
no workspace); another profile that was the default for one of those kinds there
stops being so for that kind. So there is at most one default per workspace and
kind, and one per kind for the tenant; the workspace's wins over the tenant's.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from corral.actors.egress import get_secret
from corral.actors.instances import MAX_VARS, commands_without_nul, values_without_nul
from corral.actors.sandboxes.env import KEY_PATTERN
from corral.actors.tenancy import store as tenancy_store
from corral.errors import ApiError, conflict, not_found, validation_error
from corral.ids import new_uuid
from corral.models import UNSET, Rule, Unset, model
from corral.storage import Transaction, associated_data, utc_now_iso

from . import store
from .services import ProfileServices
from .store import ProfileRecord

PROVIDERS = ("osa", "codex", "claude", "claude-code", "pi", "hermes", "custom")
KINDS = ("sandbox", "computer")
MAX_VALUE = 32_768
MAX_SECRETS = 50


_NAME = Rule(max_length=100, message="must be a non-empty string of at most 100 characters")
_PROVIDER = Rule(choices=PROVIDERS)
_MODEL = Rule(max_length=200)
_COMMAND = Rule(
    max_length=10_000, strip=False, check=lambda command: commands_without_nul([command]), description="run under /bin/sh -c in the target"
)
_APPLIES_TO = Rule(min_length=1, max_length=10, items=Rule(choices=KINDS), description="sandbox, computer (default both)")
_ENV = Rule(
    keys=KEY_PATTERN.pattern,
    max_length=MAX_VARS,
    items=Rule(strip=False, allow_empty=True, max_length=MAX_VALUE),
    check=values_without_nul,
    description="sealed; values are never returned",
)
_SECRET_IDS = Rule(max_length=MAX_SECRETS, items=Rule(format="uuid"), description="vault secrets bound as svc-tok- placeholders")


@model
class NewProfile:
    """A profile; `workspace_id` absent: a tenant-wide profile."""

    name: Annotated[str, _NAME]
    provider: Annotated[str, _PROVIDER]
    model: Annotated[str | None, _MODEL] = None
    command: Annotated[str | None, _COMMAND] = None
    applies_to: Annotated[list[str] | None, _APPLIES_TO] = None
    env: Annotated[dict[str, str] | None, _ENV] = None
    secret_ids: Annotated[list[str] | None, _SECRET_IDS] = None
    is_default: bool = False
    workspace_id: Annotated[str | None, Rule(format="uuid")] = None


@model
class ProfileChange:
    """Fields to change; `env` and `secret_ids` replace the whole set when given."""

    name: Annotated[str | Unset, _NAME] = UNSET
    provider: Annotated[str | Unset, _PROVIDER] = UNSET
    model: Annotated[str | Unset | None, _MODEL] = UNSET
    command: Annotated[str | Unset | None, _COMMAND] = UNSET
    applies_to: Annotated[list[str] | Unset, _APPLIES_TO] = UNSET
    env: Annotated[dict[str, str] | Unset, _ENV] = UNSET
    secret_ids: Annotated[list[str] | Unset, _SECRET_IDS] = UNSET
    is_default: bool | Unset = UNSET


def _aad(tenant_id: str, profile_id: str) -> bytes:
    return associated_data(tenant_id, profile_id, "agent-runtime-profile-env")


def profile_public(record: ProfileRecord) -> dict[str, Any]:
    """The profile without its env values."""
    return {
        "id": record.id,
        "tenant_id": record.tenant_id,
        "workspace_id": record.workspace_id,
        "name": record.name,
        "provider": record.provider,
        "model": record.model,
        "command": record.command,
        "applies_to": record.applies_to,
        "env_keys": record.env_keys,
        "secret_ids": record.secret_ids,
        "is_default": bool(record.default_kinds),
        "default_for": record.default_kinds,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def decrypt_env(services: ProfileServices, record: ProfileRecord) -> dict[str, str]:
    if record.env_sealed is None:
        return {}
    env: dict[str, str] = json.loads(services.secrets.decrypt_text(record.env_sealed, _aad(record.tenant_id, record.id)))
    return env


def _seal(services: ProfileServices, tenant_id: str, profile_id: str, env: dict[str, str]) -> bytes | None:
    return services.secrets.encrypt_text(json.dumps(env), _aad(tenant_id, profile_id)) if env else None


def _ordered_kinds(kinds: list[str]) -> list[str]:
    return [kind for kind in KINDS if kind in kinds]


def profile_not_found(profile_id: str) -> ApiError:
    return ApiError(404, "AGENT_RUNTIME_PROFILE_NOT_FOUND", f"agent runtime profile not found: {profile_id}")


async def _check_secrets(services: ProfileServices, tenant_id: str, secret_ids: list[str]) -> list[str]:
    """The ids, lowercased and deduplicated; 422 for one that is not the tenant's secret."""
    unique = list(dict.fromkeys(value.lower() for value in secret_ids))
    for secret_id in unique:
        try:
            await get_secret(services, tenant_id, secret_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise validation_error({"secret_ids": f"no such secret in this tenant: {secret_id}"}) from None
    return unique


async def _check_workspace(services: ProfileServices, tenant_id: str, workspace_id: str | None) -> str | None:
    if workspace_id is None:
        return None
    workspace = await tenancy_store.workspaces.load(services.db, workspace_id.lower())
    if workspace is None or workspace.tenant_id != tenant_id:
        raise not_found("workspace not found")
    return workspace.id


def _take_defaults(tx: Transaction, record: ProfileRecord, now: str) -> None:
    """`record` becomes the default for its kinds in its scope; others give those kinds up."""
    for other in store.scope_defaults(tx, record.tenant_id, record.workspace_id):
        if other.id == record.id:
            continue
        left = [kind for kind in other.default_kinds if kind not in record.default_kinds]
        if left != other.default_kinds:
            store.set_default_kinds(tx, other.id, left, now)


def _name_taken() -> ApiError:
    return conflict("PROFILE_NAME_TAKEN", "an agent runtime profile with this name already exists in the tenant")


async def create_profile(
    services: ProfileServices, tenant_id: str, new: NewProfile, *, key_workspace_id: str | None = None
) -> ProfileRecord:
    workspace_id = new.workspace_id or key_workspace_id
    if key_workspace_id is not None and workspace_id != key_workspace_id:
        raise not_found("workspace not found")
    workspace_id = await _check_workspace(services, tenant_id, workspace_id)
    secret_ids = await _check_secrets(services, tenant_id, new.secret_ids or [])
    profile_id = new_uuid()
    env = new.env or {}
    applies_to = _ordered_kinds(new.applies_to or list(KINDS))
    now = utc_now_iso()
    record = ProfileRecord(
        id=profile_id,
        tenant_id=tenant_id,
        workspace_id=workspace_id,
        name=new.name,
        provider=new.provider,
        model=new.model,
        command=new.command,
        applies_to=applies_to,
        env_keys=sorted(env),
        env_sealed=_seal(services, tenant_id, profile_id, env),
        secret_ids=secret_ids,
        default_kinds=applies_to if new.is_default else [],
        created_at=now,
        updated_at=now,
    )

    def work(tx: Transaction) -> None:
        if store.name_taken(tx, tenant_id, new.name):
            raise _name_taken()
        store.insert(tx, record)
        if record.default_kinds:
            _take_defaults(tx, record, now)

    await services.db.transaction(work)
    return record


async def find_profile(services: ProfileServices, tenant_id: str, id_or_name: str, *, key_workspace_id: str | None = None) -> ProfileRecord:
    """The tenant's profile by id or name: `404 AGENT_RUNTIME_PROFILE_NOT_FOUND` otherwise
    (also for a workspace-restricted key and another workspace's profile)."""
    record = await store.find(services.db, tenant_id, id_or_name)
    if record is None or (key_workspace_id is not None and record.workspace_id not in (None, key_workspace_id)):
        raise profile_not_found(id_or_name)
    return record


async def list_profiles(services: ProfileServices, tenant_id: str, workspace_id: str | None = None) -> list[ProfileRecord]:
    return await store.list_for_tenant(services.db, tenant_id, workspace_id)


async def update_profile(services: ProfileServices, record: ProfileRecord, change: ProfileChange) -> ProfileRecord:
    values: dict[str, Any] = {}
    for name in ("name", "provider", "model", "command"):
        value = getattr(change, name)
        if not isinstance(value, Unset):
            values[name] = value
    if not isinstance(change.applies_to, Unset):
        values["applies_to"] = _ordered_kinds(change.applies_to)
    if not isinstance(change.env, Unset):
        values["env_keys"] = sorted(change.env)
        values["env_sealed"] = _seal(services, record.tenant_id, record.id, change.env)
    if not isinstance(change.secret_ids, Unset):
        values["secret_ids"] = await _check_secrets(services, record.tenant_id, change.secret_ids)
    applies_to = values.get("applies_to", record.applies_to)
    if isinstance(change.is_default, bool):
        values["default_kinds"] = applies_to if change.is_default else []
    else:  # still the default only for kinds it still applies to
        values["default_kinds"] = [kind for kind in record.default_kinds if kind in applies_to]
    now = utc_now_iso()
    values["updated_at"] = now
    updated = store.PROFILES.replaced(record, values)

    def work(tx: Transaction) -> ProfileRecord:
        if store.load_in(tx, record.id) is None:
            raise profile_not_found(record.id)
        if "name" in values and store.name_taken(tx, record.tenant_id, updated.name, record.id):
            raise _name_taken()
        store.replace(tx, updated)
        if updated.default_kinds:
            _take_defaults(tx, updated, now)
        return updated

    return await services.db.transaction(work)


async def delete_profile(services: ProfileServices, record: ProfileRecord) -> None:
    """Remove the profile; computers and runs that used it keep what they were given."""
    await services.db.transaction(lambda tx: store.delete(tx, record.id))
