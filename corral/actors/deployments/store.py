"""The `deployments` and `deployment_versions` tables: every query about them.

Reads are for anyone in the package; the writes are the deployment actor's alone
(it owns its versions and its active pointer). Records are frozen.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.actors.tenancy.slugs import slugify
from corral.storage import Database, Transaction, utc_now_iso

LIVE_VERSION_STATES = ("ready", "archived")
"""Versions that serve at their own URL and may be promoted (contract §12)."""


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    """One deployment row (contract §12)."""

    id: str
    tenant_id: str
    name: str
    slug: str
    state: str
    workspace_id: str
    project_id: str
    active_version_id: str | None
    source_type: str
    auto_deploy: int
    metadata: dict[str, Any] = field(hash=False)
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """Its home: the node whose actor owns the row (`corral.actors.nodes.homed`)."""


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One immutable version: the record of one publish."""

    id: str
    deployment_id: str
    tenant_id: str
    version_number: int
    kind: str
    state: str
    environment: str
    source_sandbox_id: str | None
    artifact_uri: str | None
    artifact_sha256: str | None
    source_sha256: str | None
    artifact_manifest: dict[str, Any] | None = field(hash=False)
    runtime_image: str | None
    runtime_command: str | None
    runtime_port: int | None
    health_check_path: str | None
    build_log_uri: str | None
    error_code: str | None
    error_message: str | None
    workspace_id: str
    project_id: str
    external_workspace_id: str | None
    external_user_id: str | None
    promoted_at: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """The node that runs its publish."""


DEPLOYMENTS = RowStore("deployments", DeploymentRecord, json_columns=("metadata",))
VERSIONS = RowStore("deployment_versions", VersionRecord, json_columns=("artifact_manifest",))


# -- reads --------------------------------------------------------------------------------


async def find(db: Database, tenant_id: str, deployment_id: str) -> DeploymentRecord | None:
    """The tenant's deployment, unless deleted."""
    row = await db.fetch_one(
        "SELECT * FROM deployments WHERE id = ? AND tenant_id = ? AND state != 'deleted'", (deployment_id, tenant_id)
    )
    return None if row is None else DEPLOYMENTS.record(row)


async def load(db: Database, deployment_id: str) -> DeploymentRecord | None:
    return await DEPLOYMENTS.load(db, deployment_id)


async def list_for_tenant(
    db: Database, tenant_id: str, filters: dict[str, str], *, within_workspace: str | None = None
) -> list[DeploymentRecord]:
    """The tenant's deployments (the deleted only when `state=deleted` is asked for; only
    one workspace's for a key restricted to it), newest first."""
    also = "" if filters.get("state") == "deleted" else "state != 'deleted'"
    scope = [("workspace_id", within_workspace)] if within_workspace is not None else []
    return await DEPLOYMENTS.where(db, [("tenant_id", tenant_id), *scope, *filters.items()], also=also)


async def live(db: Database) -> list[DeploymentRecord]:
    """Every deployment that is not deleted (the router's table is made from them)."""
    return DEPLOYMENTS.records(await db.fetch_all("SELECT * FROM deployments WHERE state != 'deleted'"))


async def version(db: Database, deployment_id: str, version_id: str) -> VersionRecord | None:
    row = await db.fetch_one(
        "SELECT * FROM deployment_versions WHERE id = ? AND deployment_id = ?", (version_id, deployment_id)
    )
    return None if row is None else VERSIONS.record(row)


async def versions_page(
    db: Database, deployment_id: str, filters: dict[str, str], limit: int, cursor: str | None
) -> tuple[list[VersionRecord], str | None]:
    """Versions newest first, `limit` of them after `cursor` (a version id), and the next cursor."""
    clauses = ["deployment_id = ?"]
    params: list[Any] = [deployment_id]
    for name, value in filters.items():
        clauses.append(f"{name} = ?")
        params.append(value)
    if cursor:
        number = await db.fetch_value(
            "SELECT version_number FROM deployment_versions WHERE id = ? AND deployment_id = ?", (cursor, deployment_id)
        )
        if number is None:
            return [], None
        clauses.append("version_number < ?")
        params.append(int(number))
    rows = await db.fetch_all(
        f"SELECT * FROM deployment_versions WHERE {' AND '.join(clauses)} ORDER BY version_number DESC LIMIT ?",
        (*params, limit + 1),
    )
    records = VERSIONS.records(rows)
    next_cursor = records[limit - 1].id if len(records) > limit else None
    return records[:limit], next_cursor


async def live_versions(db: Database, deployment_id: str) -> list[VersionRecord]:
    """The versions that serve (ready or archived)."""
    marks = ", ".join("?" for _ in LIVE_VERSION_STATES)
    rows = await db.fetch_all(
        f"SELECT * FROM deployment_versions WHERE deployment_id = ? AND state IN ({marks}) ORDER BY version_number",
        (deployment_id, *LIVE_VERSION_STATES),
    )
    return VERSIONS.records(rows)


async def interrupted_versions(db: Database, nodes: Sequence[str], *, unrecorded: bool = False) -> list[VersionRecord]:
    """Versions whose publish, run by one of `nodes` (`unrecorded`: or by a node not
    recorded, before nodes were), was cut off by a stop of that node or its loss (still
    created or building)."""
    marks = ", ".join("?" for _ in nodes)
    unknown = "node IS NULL OR " if unrecorded else ""
    rows = await db.fetch_all(
        f"SELECT * FROM deployment_versions WHERE state IN ('created', 'building') AND ({unknown}node IN ({marks}))", tuple(nodes)
    )
    return VERSIONS.records(rows)


async def custom_domains(db: Database, deployment_id: str) -> list[str]:
    """The deployment's active custom domains, oldest first (table of the domains part,
    which may not exist on this node yet: then none)."""
    try:
        rows = await db.fetch_all(
            "SELECT fqdn FROM custom_domains WHERE deployment_id = ? AND status = 'active' ORDER BY created_at",
            (deployment_id,),
        )
    except Exception:  # no such table (the domains part is not merged): no custom domain
        return []
    return [str(row["fqdn"]) for row in rows]


# -- writes (the deployment actor's) ------------------------------------------------------


def unique_slug(tx: Transaction, base: str) -> str:
    """A DNS label unique among deployments, computers and sandboxes (all name
    `{slug}.{domain}` hosts); short enough that `v{n}-{slug}` stays within 63."""
    while True:
        candidate = f"{base[:40].strip('-') or 'app'}-{secrets.token_hex(4)}"
        taken = any(
            tx.fetch_one(f"SELECT 1 FROM {table} WHERE slug = ?", (candidate,))
            for table in ("deployments", "computers", "sandboxes")
        )
        if not taken:
            return candidate


def insert(tx: Transaction, record: DeploymentRecord) -> None:
    DEPLOYMENTS.insert(tx, record)


def new_slug(tx: Transaction, name: str) -> str:
    return unique_slug(tx, slugify(name, "app"))


def next_version_number(tx: Transaction, deployment_id: str) -> int:
    value = tx.fetch_value(
        "SELECT MAX(version_number) FROM deployment_versions WHERE deployment_id = ?", (deployment_id,)
    )
    return int(value or 0) + 1


def insert_version(tx: Transaction, record: VersionRecord) -> None:
    VERSIONS.insert(tx, record)


async def update_version(db: Database, version_id: str, values: dict[str, Any]) -> None:
    await VERSIONS.update(db, version_id, {**values, "updated_at": utc_now_iso()})


def switch_active(tx: Transaction, deployment_id: str, old_id: str | None, new_id: str, now: str) -> None:
    """One transaction: the old active version archived, the new one ready and pointed at."""
    if old_id is not None and old_id != new_id:
        tx.execute(
            "UPDATE deployment_versions SET state = 'archived', updated_at = ? WHERE id = ?", (now, old_id)
        )
    tx.execute(
        "UPDATE deployment_versions SET state = 'ready', promoted_at = ?, updated_at = ? WHERE id = ?",
        (now, now, new_id),
    )
    tx.execute(
        "UPDATE deployments SET active_version_id = ?, state = 'running', updated_at = ? WHERE id = ?",
        (new_id, now, deployment_id),
    )
