"""What the node holds of its metering task: the interface both its holder
(`services.BillingServices`) and its implementation (`metering.Metering`) import.

`Metering` needs the node's services, and the services hold the node's one
`Metering`; naming this interface here, rather than the class, keeps the two
modules (and `notices`, which wakes the task) from importing each other.
"""

from __future__ import annotations

from typing import Protocol


class MeteringHandle(Protocol):
    def wake(self) -> None:
        """Run a metering round now (a balance reached zero: stop what may no longer run)."""

    def stop(self) -> None:
        """End the task (before the actor system shuts down)."""
