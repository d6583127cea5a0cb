"""Per-end-user quotas (`external_user_id`): limits, live usage, enforcement.

Usage is counted from the instance tables themselves, so it is always what really
exists: each instance kind registers its table (`BillingHooks.register_inventory`,
through the node at start), and the callers hand those inventories in. Credits an end user
spent are the `spend` rows attributed to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError
from corral.storage import Database, Row, sql_identifier, utc_now_iso

from .hooks import Inventory
from .pricing import DISK_GB_PER_SIZE, hourly_credits

LIMITS = ("max_sandboxes", "max_concurrent", "max_storage_gb", "max_credit_cents")


@dataclass
class Usage:
    total: int = 0
    concurrent: int = 0
    storage_gb: int = 0
    active_ids: frozenset[str] = frozenset()


async def instance_usage(db: Database, inventories: Iterable[Inventory], tenant_id: str, external_user_id: str) -> Usage:
    usage = Usage()
    active: set[str] = set()
    for inventory in inventories:
        marks = ", ".join("?" for _ in inventory.gone_states) or "''"
        rows = await db.fetch_all(
            f"SELECT id, size, status FROM {sql_identifier(inventory.table)}"
            f" WHERE tenant_id = ? AND external_user_id = ? AND status NOT IN ({marks})",
            (tenant_id, external_user_id, *inventory.gone_states),
        )
        for row in rows:
            usage.total += 1
            usage.storage_gb += DISK_GB_PER_SIZE.get(row["size"], max(DISK_GB_PER_SIZE.values()))
            if row["status"] in inventory.active_states:
                active.add(row["id"])
    usage.concurrent = len(active)
    usage.active_ids = frozenset(active)
    return usage


async def credits_spent(db: Database, tenant_id: str, external_user_id: str) -> int:
    """Credits spent by the end user's instances and AI calls (one credit = one cent)."""
    value = await db.fetch_value(
        "SELECT COALESCE(-SUM(amount_credits), 0) AS n FROM credit_transactions"
        " WHERE tenant_id = ? AND external_user_id = ? AND type = 'spend'",
        (tenant_id, external_user_id),
    )
    return int(value or 0)


async def get_quota(db: Database, tenant_id: str, external_user_id: str) -> Row | None:
    return await db.fetch_one(
        "SELECT * FROM external_user_quotas WHERE tenant_id = ? AND external_user_id = ?", (tenant_id, external_user_id)
    )


async def put_quota(db: Database, tenant_id: str, external_user_id: str, limits: dict[str, int | None]) -> Row:
    """Replace the quota (limits not given are uncapped)."""
    now = utc_now_iso()
    values = {name: limits.get(name) for name in LIMITS}
    assignments = ", ".join(f"{name} = excluded.{name}" for name in values)
    await db.execute(
        "INSERT INTO external_user_quotas (tenant_id, external_user_id, max_sandboxes, max_concurrent,"
        " max_storage_gb, max_credit_cents, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        f" ON CONFLICT (tenant_id, external_user_id) DO UPDATE SET {assignments}, updated_at = excluded.updated_at",
        (tenant_id, external_user_id, *values.values(), now, now),
    )
    row = await get_quota(db, tenant_id, external_user_id)
    assert row is not None
    return row


async def delete_quota(db: Database, tenant_id: str, external_user_id: str) -> bool:
    changed = await db.execute(
        "DELETE FROM external_user_quotas WHERE tenant_id = ? AND external_user_id = ?", (tenant_id, external_user_id)
    )
    return changed > 0


async def quota_public(db: Database, inventories: Iterable[Inventory], row: Row) -> dict[str, Any]:
    usage = await instance_usage(db, inventories, row["tenant_id"], row["external_user_id"])
    spent = await credits_spent(db, row["tenant_id"], row["external_user_id"])
    return {
        "external_user_id": row["external_user_id"],
        "limits": {name: None if row[name] is None else int(row[name]) for name in LIMITS},
        "usage": {
            "total_sandboxes": usage.total,
            "concurrent": usage.concurrent,
            "storage_gb": usage.storage_gb,
            "credits_spent_cents": spent,
        },
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def quota_exceeded(code: str, message: str) -> ApiError:
    return ApiError(409, code, message)


async def check_quota(
    db: Database, inventories: Iterable[Inventory], *, tenant_id: str, external_user_id: str, size: str, resource_type: str, resource_id: str | None
) -> None:
    """Raise 409 with a `QUOTA_*_EXCEEDED` code when creating (`resource_id` None) or
    starting this instance would go past the end user's quota."""
    quota = await get_quota(db, tenant_id, external_user_id)
    if quota is None:
        return
    usage = await instance_usage(db, inventories, tenant_id, external_user_id)
    who = f"end user {external_user_id!r}"
    creating = resource_id is None
    if creating and quota["max_sandboxes"] is not None and usage.total >= quota["max_sandboxes"]:
        raise quota_exceeded(
            "QUOTA_MAX_SANDBOXES_EXCEEDED", f"{who} already has {usage.total} of at most {quota['max_sandboxes']} instances"
        )
    concurrent = len(usage.active_ids - {resource_id}) if resource_id else usage.concurrent
    if quota["max_concurrent"] is not None and concurrent >= quota["max_concurrent"]:
        raise quota_exceeded(
            "QUOTA_MAX_CONCURRENT_EXCEEDED", f"{who} already runs {concurrent} of at most {quota['max_concurrent']} instances at once"
        )
    storage = usage.storage_gb + (DISK_GB_PER_SIZE.get(size, max(DISK_GB_PER_SIZE.values())) if creating else 0)
    if quota["max_storage_gb"] is not None and storage > quota["max_storage_gb"]:
        raise quota_exceeded(
            "QUOTA_MAX_STORAGE_EXCEEDED", f"a {size} {resource_type} would bring {who} to {storage} GB of at most {quota['max_storage_gb']} GB"
        )
    if quota["max_credit_cents"] is not None:
        spent = await credits_spent(db, tenant_id, external_user_id)
        if spent + hourly_credits(size) > quota["max_credit_cents"]:
            raise quota_exceeded(
                "QUOTA_MAX_CREDITS_EXCEEDED",
                f"{who} has spent {spent} of at most {quota['max_credit_cents']} credit cents; an hour of {size} needs {hourly_credits(size)}",
            )


async def users_over_credit_cap(db: Database, tenant_id: str, external_user_ids: Iterable[str | None]) -> set[str]:
    """Those of `external_user_ids` whose spending has reached their `max_credit_cents`."""
    over = set()
    for external_user_id in {u for u in external_user_ids if u}:
        quota = await get_quota(db, tenant_id, external_user_id)
        if quota is None or quota["max_credit_cents"] is None:
            continue
        if await credits_spent(db, tenant_id, external_user_id) >= quota["max_credit_cents"]:
            over.add(external_user_id)
    return over
