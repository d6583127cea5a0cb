"""The stored network policy of an instance-owning resource (a computer, a sandbox).

One row per resource that has a policy other than the default (`unrestricted`);
DELETE removes it. Only the resource's actor writes it (`InstanceActor`), reads may
come from anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.actors.record import RowStore
from corral.net import NetworkPolicy, PolicyRule
from corral.storage import Database


@dataclass(frozen=True)
class NetworkPolicyRecord:
    resource_id: str
    resource_type: str
    tenant_id: str
    mode: str
    rules: list[dict[str, Any]]
    updated_at: str

    @property
    def policy(self) -> NetworkPolicy:
        """The policy as the net layer applies it."""
        return NetworkPolicy(self.mode, tuple(PolicyRule.from_json(rule) for rule in self.rules))


store = RowStore(
    "instance_network_policies", NetworkPolicyRecord, id_column="resource_id", json_columns=("rules",)
)


async def load(db: Database, resource_id: str) -> NetworkPolicyRecord | None:
    return await store.load(db, resource_id)


async def save(db: Database, record: NetworkPolicyRecord) -> None:
    """Insert or replace the resource's policy (a PUT replaces the whole policy)."""
    row = store.row(vars(record))
    await db.execute(
        "INSERT INTO instance_network_policies (resource_id, resource_type, tenant_id, mode, rules, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (resource_id) DO UPDATE SET"
        " mode = excluded.mode, rules = excluded.rules, updated_at = excluded.updated_at",
        (row["resource_id"], row["resource_type"], row["tenant_id"], row["mode"], row["rules"], row["updated_at"]),
    )


async def delete(db: Database, resource_id: str) -> None:
    await db.execute("DELETE FROM instance_network_policies WHERE resource_id = ?", (resource_id,))
