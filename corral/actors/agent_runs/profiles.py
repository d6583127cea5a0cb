"""Runtime profiles as runs see them: an interface the profiles part implements.

Profiles (contract §14) are another part's resource; a run only needs the profile
that applies to it, resolved. The node sets `platform.run_profiles` to that part's
resolver; None means tenants have no profiles, and a run that names one is then
`404 AGENT_RUNTIME_PROFILE_NOT_FOUND`.
"""

from __future__ import annotations

from typing import Protocol

from corral.errors import ApiError


class ResolvedProfile(Protocol):
    """The applicable profile, with its env decrypted (never returned by the API)."""

    @property
    def id(self) -> str: ...

    @property
    def provider(self) -> str | None: ...

    @property
    def model(self) -> str | None: ...

    @property
    def command(self) -> str | None: ...

    @property
    def env(self) -> dict[str, str]: ...


class RunProfiles(Protocol):
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
        """The profile `profile_id` (404 `AGENT_RUNTIME_PROFILE_NOT_FOUND` when the tenant
        has none such), else unless `skip` the workspace's or tenant's default for
        `kind`, else None. The profile's secrets are bound to `target_id`."""
        ...


def profile_not_found() -> ApiError:
    return ApiError(404, "AGENT_RUNTIME_PROFILE_NOT_FOUND", "agent runtime profile not found")


async def resolve(
    profiles: RunProfiles | None,
    tenant_id: str,
    workspace_id: str | None,
    kind: str,
    profile_id: str | None,
    skip: bool,
    *,
    target_id: str | None = None,
) -> ResolvedProfile | None:
    if profiles is None:
        if profile_id:
            raise profile_not_found()
        return None
    return await profiles.resolve_for_run(tenant_id, workspace_id, kind, profile_id, skip, target_id=target_id)
