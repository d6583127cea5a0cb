"""How billing halts a computer when credits run out, registered by the node.

A computer halted for credits ends `paused` (the specification names `paused` as a
startable state without saying what produces it): `start` resumes it once the
balance covers an hour again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from corral.actors import billing
from corral.actors.runtime import computer_disk_gb
from corral.errors import ApiError

from .actor import ComputerActor
from .billing_hooks import RESOURCE_TYPE
from .messages import Pause

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

log = logging.getLogger("corral.computers.credits")


async def halt_for_credits(platform: ComputerServices, computer_id: str) -> None:
    """Billing's stopper: pause a running computer whose tenant (or end user) is out of credits."""
    try:
        ref = await platform.system.get(ComputerActor, computer_id)
        await ref.ask(Pause(reason="credits_exhausted"), timeout=120)
    except ApiError as exc:
        # Not running (or gone): its meter should not be running either.
        log.info("computer %s was not paused: %s", computer_id, exc.message)
        await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=computer_id)


def register_with_billing(services: ComputerServices) -> None:
    """Tell this node's billing how to halt computers and where to count them for quotas."""
    hooks = services.billing_hooks
    hooks.register_stopper(RESOURCE_TYPE, lambda computer_id: halt_for_credits(services, computer_id))
    hooks.register_inventory(
        RESOURCE_TYPE, table="computers", active_states=("provisioning", "running"), gone_states=("deleted",),
        disk_gb=lambda size: computer_disk_gb(services.settings, size),
    )
