"""The gate before an instance is created or started: the node's disk reserve and
its drain (a create), credits, then quotas."""

from __future__ import annotations

from corral.actors.nodes.gate import require_accepting_work
from corral.actors.runtime import require_disk_reserve
from corral.errors import ApiError

from .credits import available_credits
from .pricing import hourly_credits
from .quotas import check_quota
from .services import BillingServices


async def require_run_allowance(
    platform: BillingServices,
    *,
    tenant_id: str,
    size: str,
    external_user_id: str | None,
    resource_type: str,
    resource_id: str | None = None,
    node_checks: bool = True,
) -> None:
    """402 INSUFFICIENT_CREDITS unless the balance covers one hour of `size`
    (contract §9); 409 `QUOTA_*_EXCEEDED` past the end user's quota.

    `resource_id` is None for a create and the instance's id for a start; a create is
    refused first with `503 SERVICE_UNAVAILABLE` while the node's data directory is
    below its disk reserve (contract §18) or the node is draining (contract §20), unless
    placement checked the node that makes it (`node_checks` False)."""
    if resource_id is None and node_checks:
        require_disk_reserve(platform.settings)
        await require_accepting_work(platform.db, platform.settings.node_name)
    need = hourly_credits(size)
    available = await available_credits(platform, tenant_id)
    if available < need:
        raise ApiError(
            402,
            "INSUFFICIENT_CREDITS",
            f"too few credits: an hour of a {size} {resource_type} needs {need}, the balance is {available}",
        )
    if external_user_id:
        await check_quota(
            platform.db,
            platform.billing_hooks.inventories(),
            tenant_id=tenant_id,
            external_user_id=external_user_id,
            size=size,
            resource_type=resource_type,
            resource_id=resource_id,
        )
