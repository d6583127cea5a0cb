"""Reading and changing a resource's network policy; the HTTP routes' side of it.

Changes go through the resource's actor (`SetNetworkPolicy`), which stores the
policy and puts it in the instance's chain; reads come from the store.
"""

from __future__ import annotations

from typing import Any

from corral.actors.actor import Actor
from corral.actors.system import ActorSystem
from corral.net import UNRESTRICTED, NetworkPolicy
from corral.storage import Database

from . import store
from .messages import SetNetworkPolicy
from .store import NetworkPolicyRecord


def policy_public(resource_type: str, resource_id: str, record: NetworkPolicyRecord | None, since: str) -> dict[str, Any]:
    """`{<type>_id, mode, rules, updated_at}`; no record is the default `unrestricted`
    (its `updated_at` the resource's `since`)."""
    if record is None:
        return {f"{resource_type}_id": resource_id, "mode": UNRESTRICTED.mode, "rules": [], "updated_at": since}
    return {
        f"{resource_type}_id": resource_id,
        "mode": record.mode,
        "rules": record.rules,
        "updated_at": record.updated_at,
    }


async def get_policy(db: Database, resource_id: str) -> NetworkPolicyRecord | None:
    return await store.load(db, resource_id)


async def set_policy(
    system: ActorSystem, actor_type: type[Actor], resource_id: str, policy: NetworkPolicy
) -> NetworkPolicyRecord | None:
    ref = await system.get(actor_type, resource_id)
    record: NetworkPolicyRecord | None = await ref.ask(SetNetworkPolicy(policy))
    return record


async def reset_policy(system: ActorSystem, actor_type: type[Actor], resource_id: str) -> None:
    """Back to `unrestricted` (the stored policy goes)."""
    await set_policy(system, actor_type, resource_id, UNRESTRICTED)
