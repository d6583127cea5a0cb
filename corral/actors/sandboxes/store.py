"""The `sandboxes` table: every query about sandbox rows, returning `SandboxRecord`s.

Reads are for anyone in the package; the writes (`create`, and the `SANDBOXES`
store's updates that `RecordActor` and `InstanceActor` make) are the sandbox actor's
alone.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from corral.actors.instances.activity import InstanceDraft
from corral.actors.record import RowStore
from corral.actors.tenancy.slugs import slugify
from corral.actors.tenancy.store import tenants
from corral.errors import ApiError, conflict
from corral.storage import Database, Transaction

ACTIVE_STATES = ("creating", "running")
"""States that count against the tenant's concurrent-sandbox cap."""
DEFAULT_SANDBOX_LIMIT = 10


@dataclass(frozen=True, slots=True)
class SandboxRecord:
    """One sandbox row."""

    id: str
    tenant_id: str
    owner_user_id: str | None
    name: str
    slug: str
    template_id: str
    size: str
    status: str
    region: str
    auto_stop: int | None
    workspace_id: str
    project_id: str
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    metadata: dict[str, Any] = field(hash=False)
    error: str | None
    forked_from: str | None
    last_activity_at: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """The node that hosts it (contract §20); None for a record made before nodes were recorded."""


SANDBOXES = RowStore("sandboxes", SandboxRecord, json_columns=("metadata",))


# -- reads ------------------------------------------------------------------------------


async def find(db: Database, tenant_id: str, sandbox_id: str) -> SandboxRecord | None:
    """The tenant's sandbox, unless destroyed."""
    row = await db.fetch_one(
        "SELECT * FROM sandboxes WHERE id = ? AND tenant_id = ? AND status != 'destroyed'", (sandbox_id, tenant_id)
    )
    return None if row is None else SANDBOXES.record(row)


async def load(db: Database, sandbox_id: str) -> SandboxRecord | None:
    return await SANDBOXES.load(db, sandbox_id)


async def list_for_tenant(
    db: Database, tenant_id: str, filters: dict[str, str], *, within_workspace: str | None = None
) -> list[SandboxRecord]:
    """The tenant's sandboxes but the destroyed (only one workspace's, for a key restricted
    to it), newest first; `filters` are column = value."""
    scope = [("workspace_id", within_workspace)] if within_workspace is not None else []
    return await SANDBOXES.where(db, [("tenant_id", tenant_id), *scope, *filters.items()], also="status != 'destroyed'")


async def being_created(db: Database, node: str) -> list[SandboxRecord]:
    """This node's sandboxes whose creation a control-plane stop cut off (another node's
    are being created there, or are its to take over when it is lost)."""
    rows = await db.fetch_all("SELECT * FROM sandboxes WHERE status = 'creating' AND (node = ? OR node IS NULL)", (node,))
    return SANDBOXES.records(rows)


async def by_slug(db: Database, slug: str) -> SandboxRecord | None:
    """The sandbox a preview host names, unless destroyed."""
    row = await db.fetch_one("SELECT * FROM sandboxes WHERE slug = ? AND status != 'destroyed'", (slug,))
    return None if row is None else SANDBOXES.record(row)


def unique_slug(tx: Transaction, base: str) -> str:
    """`base` with a random suffix no sandbox has. At most 57 characters, so that a
    preview host's first label `{port}-{slug}` stays within DNS's 63."""
    while True:
        candidate = f"{base[:48].rstrip('-')}-{secrets.token_hex(4)}"
        if not tx.fetch_one("SELECT 1 FROM sandboxes WHERE slug = ?", (candidate,)):
            return candidate


def active_count(tx: Transaction, tenant_id: str) -> int:
    marks = ", ".join("?" for _ in ACTIVE_STATES)
    value = tx.fetch_value(
        f"SELECT COUNT(*) AS n FROM sandboxes WHERE tenant_id = ? AND status IN ({marks})", (tenant_id, *ACTIVE_STATES)
    )
    return int(value or 0)


def sandbox_limit(tx: Transaction, tenant_id: str) -> int:
    return int(tx.fetch_value("SELECT sandbox_limit FROM tenants WHERE id = ?", (tenant_id,)) or DEFAULT_SANDBOX_LIMIT)


# -- writes (the sandbox actor's) -------------------------------------------------------------


@dataclass(frozen=True)
class SandboxDraft(InstanceDraft):
    """What a new sandbox's row is made from (`ActorSystem.create`)."""

    name: str | None
    template_id: str
    size: str
    auto_stop: int | None
    metadata: dict[str, Any] = field(hash=False)
    forked_from: str | None = None
    region: str = "local"
    """The region of the node it is placed on (or asked for: `placement.region_of`)."""


def limit_reached(limit: int) -> ApiError:
    return conflict("SANDBOX_LIMIT_REACHED", f"concurrent sandbox limit of {limit} reached")


def create(tx: Transaction, sandbox_id: str, draft: SandboxDraft, node: str) -> SandboxRecord:
    """Insert the new sandbox (`creating`) within the tenant's concurrent-sandbox cap."""
    tenant_id = draft.attribution.tenant_id
    tenants.lock(tx, tenant_id)
    limit = sandbox_limit(tx, tenant_id)
    if active_count(tx, tenant_id) >= limit:
        raise limit_reached(limit)
    record = SandboxRecord(
        **draft.fresh_columns(),
        node=node,
        id=sandbox_id,
        name=draft.name or "sandbox",
        slug=unique_slug(tx, slugify(draft.name or "sbx", "sbx")),
        template_id=draft.template_id,
        size=draft.size,
        status="creating",
        region=draft.region,
        auto_stop=draft.auto_stop or None,
        metadata=draft.metadata,
        forked_from=draft.forked_from,
    )
    SANDBOXES.insert(tx, record)
    return record

