"""Profiles applied: to computers (through `ProfileResolver`) and to agent runs.

Computer creation asks the node's `agent_runtime_profiles` (this module's
`ProfileResolver`) for the explicit profile or the default one, stores its env in
the computer's sealed env store and calls `applied` once the computer exists, which
binds the profile's secrets to it. Agent runs call `resolve_for_run`.

A secret is bound under an env name made from its name (upper case, anything but
letters, digits and `_` as `_`); a secret whose scope does not cover the resource, or
that is bound under that name already, is skipped (logged), never an error for the
create that applied the profile.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Literal

from corral.actors.computers.services import AgentRuntimeProfile, ComputerServices
from corral.actors.egress import Caller, NewBinding, create_binding, get_secret
from corral.errors import ApiError

from . import store
from .service import decrypt_env, profile_not_found
from .services import ProfileServices
from .store import ProfileRecord

log = logging.getLogger("corral.agent_profiles")

_NOT_ENV = re.compile(r"[^A-Z0-9_]")


def env_name(secret_name: str) -> str:
    """`my-api key` -> `MY_API_KEY`; a name starting with a digit gets `S_` in front."""
    name = _NOT_ENV.sub("_", secret_name.upper()).strip("_") or "SECRET"
    return name if name[0].isalpha() else f"S_{name}"


@dataclass(frozen=True)
class ResolvedProfile:
    """What a run gets of its profile: provider, model, command and decrypted env."""

    id: str
    provider: str
    model: str | None
    command: str | None
    env: dict[str, str] = field(default_factory=dict)


def not_applicable(profile_id: str, kind: str) -> ApiError:
    noun = "computers" if kind == "computer" else "sandboxes"
    return ApiError(422, "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE", f"agent runtime profile {profile_id} does not apply to {noun}")


async def default_profile(services: ProfileServices, tenant_id: str, workspace_id: str | None, kind: str) -> ProfileRecord | None:
    """The workspace's default for `kind`, else the tenant's."""
    scopes: list[str | None] = [workspace_id, None] if workspace_id else [None]
    for scope in scopes:
        for record in await store.defaults_in(services.db, tenant_id, scope):
            if kind in record.default_kinds:
                return record
    return None


async def bind_secrets(
    services: ProfileServices, record: ProfileRecord, resource_type: Literal["sandbox", "computer"], resource_id: str
) -> list[str]:
    """Bind the profile's secrets to the resource; the env names bound."""
    bound = []
    caller = Caller(tenant_id=record.tenant_id, is_admin=True)
    for secret_id in record.secret_ids:
        try:
            secret = await get_secret(services, record.tenant_id, secret_id)
            name = env_name(secret.name)
            await create_binding(
                services, caller, NewBinding(secret_id=secret.id, resource_id=resource_id, resource_type=resource_type, expose_as_env=name)
            )
            bound.append(name)
        except ApiError as exc:  # gone since, outside its scope, or bound already
            log.info("profile %s: secret %s not bound to %s %s: %s", record.id, secret_id, resource_type, resource_id, exc.message)
    return bound


async def resolve_for_run(
    services: ProfileServices,
    tenant_id: str,
    workspace_id: str | None,
    kind: str,
    profile_id: str | None,
    skip: bool,
    *,
    target_id: str | None = None,
) -> ResolvedProfile | None:
    """The profile an agent run on a `kind` target (`sandbox`, `computer`) uses.

    An explicit `profile_id` (id or name) must be the tenant's (`404
    AGENT_RUNTIME_PROFILE_NOT_FOUND`) and apply to `kind` (`422
    AGENT_RUNTIME_PROFILE_NOT_APPLICABLE`); without one, the workspace's (else the
    tenant's) default for `kind` applies unless `skip`. With `target_id`, the profile's
    secrets are bound to the target, whose env then carries their placeholders."""
    if profile_id is not None:
        record = await store.find(services.db, tenant_id, profile_id)
        if record is None:
            raise profile_not_found(profile_id)
        if kind not in record.applies_to:
            raise not_applicable(profile_id, kind)
    elif skip:
        return None
    else:
        record = await default_profile(services, tenant_id, workspace_id, kind)
        if record is None:
            return None
    if target_id is not None and record.secret_ids:
        await bind_secrets(services, record, "computer" if kind == "computer" else "sandbox", target_id)
    return ResolvedProfile(record.id, record.provider, record.model, record.command, decrypt_env(services, record))


def _for_computers(services: ProfileServices, record: ProfileRecord) -> AgentRuntimeProfile:
    return AgentRuntimeProfile(id=record.id, applies_to_computers="computer" in record.applies_to, env=decrypt_env(services, record))


class RunProfileResolver:
    """The node's `run_profiles` (`corral.actors.agent_runs.RunProfiles`): `resolve_for_run`
    over the node's services."""

    def __init__(self, services: ProfileServices) -> None:
        self.services = services

    async def resolve_for_run(
        self,
        tenant_id: str,
        workspace_id: str | None,
        kind: str,
        profile_id: str | None,
        skip: bool,
        *,
        target_id: str | None = None,
    ) -> ResolvedProfile | None:
        return await resolve_for_run(self.services, tenant_id, workspace_id, kind, profile_id, skip, target_id=target_id)


class ProfileResolver:
    """The node's `agent_runtime_profiles` (`corral.actors.computers.ProfileResolver`)."""

    async def find(self, platform: ComputerServices, tenant_id: str, profile_id: str) -> AgentRuntimeProfile | None:
        record = await store.find(platform.db, tenant_id, profile_id)
        return None if record is None else _for_computers(platform, record)

    async def default_for(self, platform: ComputerServices, tenant_id: str, workspace_id: str) -> AgentRuntimeProfile | None:
        record = await default_profile(platform, tenant_id, workspace_id, "computer")
        return None if record is None else _for_computers(platform, record)

    async def applied(self, platform: ComputerServices, tenant_id: str, profile_id: str, computer_id: str) -> None:
        record = await store.find(platform.db, tenant_id, profile_id)
        if record is not None and record.secret_ids:
            await bind_secrets(platform, record, "computer", computer_id)
