"""What each instance kind tells billing, on one node.

Billing owns the ledger and the meters but knows no instance kind. Each kind
registers, through the node at start, how to stop one of its instances when credits
run out (a stopper bound to that node's services) and where its instances are
counted for end-user quotas (an `Inventory`). The hooks live on the node's services
(`billing_hooks`), not in the module: two nodes in one process (tests, a multi-node
demo) each stop their own instances.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from corral.storage import sql_identifier

Stopper = Callable[[str], Awaitable[None]]
"""`stop(resource_id)`: halt one running instance (it stops its meter itself)."""


@dataclass(frozen=True)
class Inventory:
    """Where one kind of instance lives: a table with `tenant_id`, `external_user_id`,
    `status` and `size` columns, the statuses that count as running, those of
    instances that no longer exist, and the disk (GiB) an instance of a size holds
    (counted against `max_storage_gb`)."""

    table: str
    active_states: tuple[str, ...]
    gone_states: tuple[str, ...]
    disk_gb: Callable[[str], float]


class BillingHooks:
    def __init__(self) -> None:
        self._stoppers: dict[str, Stopper] = {}
        self._inventories: dict[str, Inventory] = {}

    def register_stopper(self, resource_type: str, stop: Stopper) -> None:
        """How to stop one running instance of `resource_type` (by id)."""
        self._stoppers[resource_type] = stop

    def register_inventory(
        self,
        resource_type: str,
        *,
        table: str,
        active_states: Iterable[str],
        gone_states: Iterable[str],
        disk_gb: Callable[[str], float],
    ) -> None:
        """Count instances of `resource_type` (in `table`) against end-user quotas; one of
        size `size` holds `disk_gb(size)` GiB of disk."""
        self._inventories[resource_type] = Inventory(sql_identifier(table), tuple(active_states), tuple(gone_states), disk_gb)

    def stopper(self, resource_type: str) -> Stopper | None:
        return self._stoppers.get(resource_type)

    def inventories(self) -> dict[str, Inventory]:
        return dict(self._inventories)
