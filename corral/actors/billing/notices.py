"""After a ledger change: announce low and exhausted balances, and wake the meter.

Stopping instances is never done here: this runs inside actor handlers (an
instance's own `meter_stop`), and stopping asks actors, so it is left to the
metering task, which this wakes up.
"""

from __future__ import annotations

from typing import Any

from corral.storage import Event

from .ledger import Outcome
from .services import BillingServices


def low_threshold(platform: BillingServices) -> int:
    return int(platform.settings.credit_low_threshold)


async def settle(platform: BillingServices, outcome: Outcome) -> None:
    """Publish what `outcome` calls for; an empty balance wakes the metering task."""
    data: dict[str, Any] = {"tenant_id": outcome.tenant_id, "balance_credits": outcome.balance}
    if outcome.low:
        await platform.bus.publish(
            Event("billing.credit_low", "tenant", outcome.tenant_id, {**data, "threshold_credits": outcome.low_threshold}, tenant_id=outcome.tenant_id)
        )
    if outcome.exhausted:
        await platform.bus.publish(Event("billing.credit_exhausted", "tenant", outcome.tenant_id, data, tenant_id=outcome.tenant_id))
    if outcome.balance <= 0 and platform.metering is not None:
        platform.metering.wake()
