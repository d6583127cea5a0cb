"""Computers and billing: the allowance before a computer runs and its meter while it runs.

Billing (corral.actors.billing) owns the ledger and the arithmetic; this module only
says which computer, which size and whose end user. How billing halts a computer
when credits run out is `credits` (it needs the actor, which needs this module).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from corral.actors import billing

from .store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

log = logging.getLogger("corral.computers.billing")

RESOURCE_TYPE = "computer"


async def require_allowance(
    platform: ComputerServices, row: ComputerRecord | None, size: str, *, tenant_id: str | None = None, external_user_id: str | None = None
) -> None:
    """402 INSUFFICIENT_CREDITS (or a 409 quota code) unless an hour of `size` is covered.

    `row` is the computer being started, or None for one about to be created."""
    await billing.require_run_allowance(
        platform,
        tenant_id=row.tenant_id if row is not None else str(tenant_id),
        size=size,
        external_user_id=row.external_user_id if row is not None else external_user_id,
        resource_type=RESOURCE_TYPE,
        resource_id=row.id if row is not None else None,
    )


async def meter_started(platform: ComputerServices, row: ComputerRecord) -> None:
    try:
        await billing.meter_instance(platform, RESOURCE_TYPE, row)
    except Exception:  # the computer runs either way; the next start or stop settles the meter
        log.exception("could not start the meter of computer %s", row.id)


async def meter_stopped(platform: ComputerServices, row: ComputerRecord) -> None:
    try:
        await billing.meter_stop(platform, resource_type=RESOURCE_TYPE, resource_id=row.id)
    except Exception:
        log.exception("could not stop the meter of computer %s", row.id)
