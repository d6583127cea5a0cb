"""Per-end-user quotas (`external_user_id`): limits, live usage, enforcement.

Usage is counted from the instance tables themselves, so it is always what really
exists: each instance kind registers its table (`BillingHooks.register_inventory`,
through the node at start), and the callers hand those inventories in. Credits an end user
spent are the `spend` rows attributed to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.actors.runtime import disk_mb
from corral.errors import ApiError
from corral.storage import Database, utc_now_iso

from . import store
from .hooks import Inventory
from .pricing import hourly_credits
from .store import QUOTA_LIMITS, QuotaRecord, credits_spent

LIMITS = QUOTA_LIMITS
"""The limits a quota sets (spec "Quotas")."""


@dataclass
class Usage:
    total: int = 0
    concurrent: int = 0
    storage_mb: int = 0
    """MiB of disk the live instances hold (their kinds' `disk_gb` of their sizes)."""
    active_ids: frozenset[str] = frozenset()

    @property
    def storage_gb(self) -> int | float:
        return gb(self.storage_mb)


def gb(mb: int) -> int | float:
    """GiB of `mb` MiB: a whole number when it is one (sizes may be fractions of a GiB)."""
    return mb // 1024 if mb % 1024 == 0 else round(mb / 1024, 3)


async def instance_usage(db: Database, inventories: Iterable[Inventory], tenant_id: str, external_user_id: str) -> Usage:
    usage = Usage()
    active: set[str] = set()
    for inventory in inventories:
        for instance in await store.live_instances(db, inventory.table, tenant_id, external_user_id, inventory.gone_states):
            usage.total += 1
            usage.storage_mb += disk_mb(inventory.disk_gb(instance.size))
            if instance.status in inventory.active_states:
                active.add(instance.id)
    usage.concurrent = len(active)
    usage.active_ids = frozenset(active)
    return usage


async def get_quota(db: Database, tenant_id: str, external_user_id: str) -> QuotaRecord | None:
    return await store.find_quota(db, tenant_id, external_user_id)


async def put_quota(db: Database, tenant_id: str, external_user_id: str, limits: dict[str, int | None]) -> QuotaRecord:
    """Replace the quota (limits not given are uncapped)."""
    await store.upsert_quota(db, tenant_id, external_user_id, limits, utc_now_iso())
    quota = await get_quota(db, tenant_id, external_user_id)
    assert quota is not None
    return quota


async def delete_quota(db: Database, tenant_id: str, external_user_id: str) -> bool:
    return await store.delete_quota(db, tenant_id, external_user_id)


async def quota_public(db: Database, inventories: Iterable[Inventory], quota: QuotaRecord) -> dict[str, Any]:
    usage = await instance_usage(db, inventories, quota.tenant_id, quota.external_user_id)
    spent = await credits_spent(db, quota.tenant_id, quota.external_user_id)
    return {
        "external_user_id": quota.external_user_id,
        "limits": quota.limits(),
        "usage": {
            "total_sandboxes": usage.total,
            "concurrent": usage.concurrent,
            "storage_gb": usage.storage_gb,
            "credits_spent_cents": spent,
        },
        "created_at": quota.created_at,
        "updated_at": quota.updated_at,
    }


def quota_exceeded(code: str, message: str) -> ApiError:
    return ApiError(409, code, message)


async def check_quota(
    db: Database, inventories: Mapping[str, Inventory], *, tenant_id: str, external_user_id: str, size: str, resource_type: str, resource_id: str | None
) -> None:
    """Raise 409 with a `QUOTA_*_EXCEEDED` code when creating (`resource_id` None) or
    starting this instance would go past the end user's quota (`inventories` by
    resource type)."""
    quota = await get_quota(db, tenant_id, external_user_id)
    if quota is None:
        return
    usage = await instance_usage(db, inventories.values(), tenant_id, external_user_id)
    who = f"end user {external_user_id!r}"
    creating = resource_id is None
    if creating and quota.max_sandboxes is not None and usage.total >= quota.max_sandboxes:
        raise quota_exceeded(
            "QUOTA_MAX_SANDBOXES_EXCEEDED", f"{who} already has {usage.total} of at most {quota.max_sandboxes} instances"
        )
    concurrent = len(usage.active_ids - {resource_id}) if resource_id else usage.concurrent
    if quota.max_concurrent is not None and concurrent >= quota.max_concurrent:
        raise quota_exceeded(
            "QUOTA_MAX_CONCURRENT_EXCEEDED", f"{who} already runs {concurrent} of at most {quota.max_concurrent} instances at once"
        )
    kind = inventories.get(resource_type)
    new_mb = disk_mb(kind.disk_gb(size)) if creating and kind is not None else 0
    storage_mb = usage.storage_mb + new_mb
    if quota.max_storage_gb is not None and storage_mb > quota.max_storage_gb * 1024:
        raise quota_exceeded(
            "QUOTA_MAX_STORAGE_GB_EXCEEDED",
            f"a {resource_type} of {gb(new_mb)} GB of disk would bring {who} to {gb(storage_mb)} GB of at most {quota.max_storage_gb} GB",
        )
    if quota.max_credit_cents is not None:
        spent = await credits_spent(db, tenant_id, external_user_id)
        if spent + hourly_credits(size) > quota.max_credit_cents:
            raise quota_exceeded(
                "QUOTA_MAX_CREDITS_EXCEEDED",
                f"{who} has spent {spent} of at most {quota.max_credit_cents} credit cents; an hour of {size} needs {hourly_credits(size)}",
            )


async def users_over_credit_cap(db: Database, tenant_id: str, external_user_ids: Iterable[str | None]) -> set[str]:
    """Those of `external_user_ids` whose spending has reached their `max_credit_cents`."""
    over = set()
    for external_user_id in {u for u in external_user_ids if u}:
        quota = await get_quota(db, tenant_id, external_user_id)
        if quota is None or quota.max_credit_cents is None:
            continue
        if await credits_spent(db, tenant_id, external_user_id) >= quota.max_credit_cents:
            over.add(external_user_id)
    return over
