"""How billing stops a deployment service when credits run out, registered by the node."""

from __future__ import annotations

from corral.actors.runtime import sandbox_disk_gb
from corral.errors import ApiError

from .messages import Halt
from .service_actor import DeploymentServiceActor
from .service_billing import RESOURCE_TYPE, meter_off
from .service_store import ServiceRecord
from .services import DeploymentServices


async def stop_for_credits(platform: DeploymentServices, service_id: str) -> None:
    """The stopper billing calls: halt the service, then unroute it (its URLs answer 503)."""
    ref = await platform.system.get(DeploymentServiceActor, service_id)
    try:
        record: ServiceRecord = await ref.ask(Halt(), timeout=120)
    except ApiError as exc:
        if exc.code not in ("INVALID_STATE", "NOT_FOUND"):
            raise
        await meter_off(platform, service_id)  # it had already left running
        return
    if platform.deployment_sites is not None:
        await platform.deployment_sites.reload(record.deployment_id)


def register_with_billing(services: DeploymentServices) -> None:
    """Tell this node's billing how to stop deployment services and where to count them."""
    hooks = services.billing_hooks
    hooks.register_stopper(RESOURCE_TYPE, lambda service_id: stop_for_credits(services, service_id))
    hooks.register_inventory(
        RESOURCE_TYPE, table="deployment_services", active_states=("starting", "running"), gone_states=("destroyed",),
        disk_gb=lambda size: sandbox_disk_gb(services.settings),
    )
