"""How billing stops a sandbox when credits run out, registered by the node."""

from __future__ import annotations

from corral.actors.runtime import sandbox_disk_gb
from corral.actors.sandboxes.services import SandboxServices
from corral.errors import ApiError

from .billing_hooks import RESOURCE_TYPE, meter_off
from .messages import Stop
from .service import lifecycle


async def stop_for_credits(platform: SandboxServices, sandbox_id: str) -> None:
    """The stopper billing calls when credits (or an end user's credit quota) run out."""
    try:
        await lifecycle(platform, sandbox_id, Stop(reason="credits_exhausted"))
    except ApiError as exc:
        if exc.code not in ("SANDBOX_NOT_RUNNING", "NOT_FOUND"):
            raise
        await meter_off(platform, sandbox_id)  # it had already left running


def register_with_billing(services: SandboxServices) -> None:
    """Tell this node's billing how to stop sandboxes and where to count them for quotas."""
    hooks = services.billing_hooks
    hooks.register_stopper(RESOURCE_TYPE, lambda sandbox_id: stop_for_credits(services, sandbox_id))
    hooks.register_inventory(
        RESOURCE_TYPE, table="sandboxes", active_states=("creating", "running"), gone_states=("destroyed",),
        disk_gb=lambda size: sandbox_disk_gb(services.settings),
    )
