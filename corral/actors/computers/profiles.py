"""Agent runtime profiles as computer creation sees them.

Profiles themselves (their records and endpoints) belong to the agent-runs part of
the platform. Computers need only two questions answered, so they ask them through
a small interface that part sets as `platform.agent_runtime_profiles`:
"is this explicit profile in the tenant?" and "which default applies here?". With no
resolver registered the tenant has no profiles: an explicit profile is
`404 AGENT_RUNTIME_PROFILE_NOT_FOUND`, and no default applies.
"""

from __future__ import annotations

from typing import Annotated

from corral.errors import ApiError, validation_error
from corral.models import Rule, model

from .services import AgentRuntimeProfile, ComputerServices

_PROFILE_ID = "must be a non-empty string (a UUID or a profile name) of at most 255 characters"
ProfileId = Annotated[str | None, Rule(max_length=255, message=_PROFILE_ID)]


@model(
    schema={
        "not": {
            "required": ["agent_runtime_profile_id", "agent_profile_id"],
            "properties": {"agent_runtime_profile_id": {"type": "string"}, "agent_profile_id": {"type": "string"}},
        }
    }
)
class ProfileRequest:
    """`agent_runtime_profile_id` (alias `agent_profile_id`) and `skip_agent_runtime_profile`."""

    agent_runtime_profile_id: ProfileId = None
    agent_profile_id: ProfileId = None
    skip_agent_runtime_profile: Annotated[bool | None, Rule(description="create without the default profile")] = None

    def __post_init__(self) -> None:
        given = {self.agent_runtime_profile_id, self.agent_profile_id} - {None}
        if len(given) > 1:
            raise validation_error({"agent_profile_id": "differs from agent_runtime_profile_id; give one of them"})

    @property
    def profile_id(self) -> str | None:
        return self.agent_runtime_profile_id or self.agent_profile_id

    @property
    def skip_default(self) -> bool:
        return bool(self.skip_agent_runtime_profile)


def profile_not_found(profile_id: str) -> ApiError:
    return ApiError(404, "AGENT_RUNTIME_PROFILE_NOT_FOUND", f"agent runtime profile not found: {profile_id}")


def profile_not_applicable(profile_id: str) -> ApiError:
    return ApiError(422, "AGENT_RUNTIME_PROFILE_NOT_APPLICABLE", f"agent runtime profile {profile_id} does not apply to computers")


async def explicit_profile(platform: ComputerServices, tenant_id: str, request: ProfileRequest) -> AgentRuntimeProfile | None:
    """The profile the caller named, which must be in the tenant and apply to computers."""
    if request.profile_id is None:
        return None
    resolver = platform.agent_runtime_profiles
    profile = await resolver.find(platform, tenant_id, request.profile_id) if resolver else None
    if profile is None:
        raise profile_not_found(request.profile_id)
    if not profile.applies_to_computers:
        raise profile_not_applicable(request.profile_id)
    return profile


async def default_profile(
    platform: ComputerServices, tenant_id: str, workspace_id: str, request: ProfileRequest
) -> AgentRuntimeProfile | None:
    """The default profile a computer without an explicit one gets, unless skipped; a
    default that does not apply to computers is simply not applied."""
    resolver = platform.agent_runtime_profiles
    if request.profile_id is not None or request.skip_default or resolver is None:
        return None
    default = await resolver.default_for(platform, tenant_id, workspace_id)
    return default if default is not None and default.applies_to_computers else None
