"""What billing needs of its node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

import trio

from corral.actors.bus import EventBus
from corral.config import Settings
from corral.storage import Database

from .hooks import BillingHooks
from .metering_handle import MeteringHandle


class BillingServices(Protocol):
    settings: Settings
    db: Database
    bus: EventBus
    nursery: trio.Nursery
    metering: MeteringHandle | None
    """The node's running metering task, a `Metering` (None before billing started and after it stopped)."""
    billing_hooks: BillingHooks
    """How each instance kind is stopped and counted on this node."""
