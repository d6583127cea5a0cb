"""Where deployment services meet billing: the run allowance, the meter, the stopper.

A service is metered like a sandbox of its size while its persisted status is
`running` (the actor calls `follow_status` on every save). When the tenant's credits
run out, billing's stopper halts it (`stopped`: the router answers 503, its files
stay); promoting or rolling back to its version starts it again, after the same
allowance check as a new one (402 `INSUFFICIENT_CREDITS`).
"""

from __future__ import annotations

from typing import Any

from corral.actors import billing
from corral.actors.billing.services import BillingServices

RESOURCE_TYPE = "deployment_service"


async def allow_run(
    platform: BillingServices, tenant_id: str, size: str, external_user_id: str | None, service_id: str | None = None,
    *, placed: bool = False,
) -> None:
    """402/409 before a service is created or started again (`placed`: a create whose
    node placement chose, which checked that node's room and drain)."""
    await billing.require_run_allowance(
        platform, tenant_id=tenant_id, size=size, external_user_id=external_user_id or None,
        resource_type=RESOURCE_TYPE, resource_id=service_id, node_checks=not placed,
    )


async def follow_status(platform: BillingServices, service: Any) -> None:
    """Meter a service while its persisted status is `running`, and only then."""
    if service.status == "running":
        await billing.meter_instance(platform, RESOURCE_TYPE, service)
    else:
        await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=service.id)


async def meter_off(platform: BillingServices, service_id: str) -> None:
    await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=service_id)
