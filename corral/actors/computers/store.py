"""The `computers` table: every query about computer rows, returning `ComputerRecord`s.

Reads are for anyone in the package; the writes (`create`, `delete`, and the
`COMPUTERS` store's updates that `RecordActor` and `InstanceActor` make) are the
computer actor's alone.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from corral.actors.instances.activity import InstanceDraft
from corral.actors.record import RowStore
from corral.actors.tenancy.slugs import slugify
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class ComputerRecord:
    """One computer row (`selected_apps`, `settings`, `ai_config` decoded)."""

    id: str
    tenant_id: str
    owner_user_id: str | None
    name: str
    slug: str
    template_type: str
    size: str
    status: str
    instance_id: str
    vm_id: str | None
    region: str
    workspace_id: str
    project_id: str
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    selected_apps: list[str] = field(hash=False)
    settings: dict[str, Any] = field(hash=False)
    ai_config: dict[str, Any] = field(hash=False)
    agent_session_id: str | None
    agent_status: str | None
    agent_runtime_profile_id: str | None
    resolution: str
    auto_stop: int
    error: str | None
    cloned_from: str | None
    last_activity_at: str
    created_at: str
    updated_at: str
    from_snapshot_id: str | None
    """The snapshot whose files the computer was created with."""
    node: str | None = None
    """The node that hosts it (contract §20); None for a record made before nodes were recorded."""


COMPUTERS = RowStore("computers", ComputerRecord, json_columns=("selected_apps", "settings", "ai_config"))


@dataclass(frozen=True)
class ComputerDraft(InstanceDraft):
    """What a new computer's row is made from (`ActorSystem.create`)."""

    name: str
    template_type: str
    size: str
    region: str
    selected_apps: list[str] = field(hash=False)
    resolution: str
    agent_runtime_profile_id: str | None = None
    settings: dict[str, Any] = field(default_factory=dict, hash=False)
    ai_config: dict[str, Any] = field(default_factory=dict, hash=False)
    auto_stop: int = 0
    cloned_from: str | None = None
    from_snapshot_id: str | None = None


# -- reads ------------------------------------------------------------------------------


async def load(db: Database, computer_id: str) -> ComputerRecord | None:
    return await COMPUTERS.load(db, computer_id)


async def find(db: Database, tenant_id: str, computer_id: str) -> ComputerRecord | None:
    row = await db.fetch_one("SELECT * FROM computers WHERE id = ? AND tenant_id = ?", (computer_id, tenant_id))
    return None if row is None else COMPUTERS.record(row)


async def by_slug(db: Database, slug: str) -> ComputerRecord | None:
    """The computer whose host name is `slug` (slugs are unique and never reused)."""
    found = await COMPUTERS.where(db, [("slug", slug)])
    return found[0] if found else None


async def list_for_tenant(
    db: Database, tenant_id: str, filters: dict[str, str], *, within_workspace: str | None = None
) -> list[ComputerRecord]:
    """The tenant's computers (only one workspace's, for a key restricted to it), newest
    first; `filters` are column = value."""
    scope = [("workspace_id", within_workspace)] if within_workspace is not None else []
    return await COMPUTERS.where(db, [("tenant_id", tenant_id), *scope, *filters.items()])


async def being_provisioned(db: Database, node: str) -> list[ComputerRecord]:
    """This node's computers whose provisioning a stop cut off (another node's are its own)."""
    rows = await db.fetch_all("SELECT * FROM computers WHERE status = 'provisioning' AND (node = ? OR node IS NULL)", (node,))
    return COMPUTERS.records(rows)


async def running(db: Database) -> list[ComputerRecord]:
    return COMPUTERS.records(await db.fetch_all("SELECT * FROM computers WHERE status = 'running'"))


def unique_slug(tx: Transaction, base: str) -> str:
    """A DNS label unique among computers and sandboxes (both name preview hosts)."""
    while True:
        candidate = f"{base[:54].strip('-') or 'computer'}-{secrets.token_hex(4)}"
        taken = tx.fetch_one("SELECT 1 FROM computers WHERE slug = ?", (candidate,)) or tx.fetch_one(
            "SELECT 1 FROM sandboxes WHERE slug = ?", (candidate,)
        )
        if not taken:
            return candidate


# -- writes (the computer actor's) ------------------------------------------------------------


def create(tx: Transaction, computer_id: str, draft: ComputerDraft, node: str) -> ComputerRecord:
    """Insert the new computer, `provisioning`."""
    record = ComputerRecord(
        **draft.fresh_columns(),
        node=node,
        id=computer_id,
        name=draft.name,
        slug=unique_slug(tx, slugify(draft.name, "computer")),
        template_type=draft.template_type,
        size=draft.size,
        status="provisioning",
        # Random from the first character: host veths and firewall chains are named
        # after the id's first 12 characters (corral.net).
        instance_id=f"vm-{uuid.uuid4().hex}",
        vm_id=None,
        region=draft.region,
        selected_apps=draft.selected_apps,
        settings=draft.settings,
        ai_config=draft.ai_config,
        agent_session_id=None,
        agent_status=None,
        agent_runtime_profile_id=draft.agent_runtime_profile_id,
        resolution=draft.resolution,
        auto_stop=draft.auto_stop,
        cloned_from=draft.cloned_from,
        from_snapshot_id=draft.from_snapshot_id,
    )
    COMPUTERS.insert(tx, record)
    return record


def delete(tx: Transaction, computer_id: str) -> None:
    """The row and what hangs on it (env, metrics, snapshots)."""
    for table in ("computer_env", "computer_metrics", "computer_snapshots"):
        tx.execute(f"DELETE FROM {table} WHERE computer_id = ?", (computer_id,))
    COMPUTERS.delete(tx, computer_id)
