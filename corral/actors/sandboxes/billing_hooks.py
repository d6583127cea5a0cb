"""Where sandboxes meet billing: the run allowance and the meter (the stopper is `credits`).

Kept apart from the service and the actor so each of them calls billing in one
line. The meter follows the sandbox's persisted status (every `save`), so every
way into or out of `running` (boot, start, stop, suspend, destroy, a lost
instance found at re-activation, a supervisor giving up) starts or stops it.
"""

from __future__ import annotations

from corral.actors import billing
from corral.actors.sandboxes.services import SandboxServices

from . import store
from .store import SandboxRecord

RESOURCE_TYPE = "sandbox"
STARTABLE = ("stopped", "suspended")


async def allow_create(platform: SandboxServices, tenant_id: str, size: str, external_user_id: str | None) -> None:
    """402/409 before a new sandbox (create or fork) is written."""
    await billing.require_run_allowance(
        platform,
        tenant_id=tenant_id,
        size=size,
        external_user_id=external_user_id or None,
        resource_type=RESOURCE_TYPE,
    )


async def allow_start(platform: SandboxServices, sandbox_id: str) -> None:
    """402/409 before a stopped or suspended sandbox starts; other states get the actor's own 409."""
    sandbox = await store.load(platform.db, sandbox_id)
    if sandbox is None or sandbox.status not in STARTABLE:
        return
    await billing.require_run_allowance(
        platform,
        tenant_id=sandbox.tenant_id,
        size=sandbox.size,
        external_user_id=sandbox.external_user_id,
        resource_type=RESOURCE_TYPE,
        resource_id=sandbox_id,
    )


async def follow_status(platform: SandboxServices, sandbox: SandboxRecord) -> None:
    """Meter a sandbox while its persisted status is `running`, and only then."""
    if sandbox.status == "running":
        await billing.meter_instance(platform, RESOURCE_TYPE, sandbox)
    else:
        await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=sandbox.id)


async def meter_off(platform: SandboxServices, sandbox_id: str) -> None:
    await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=sandbox_id)
