"""The `custom_domains` table: SQL for custom domains, rows as frozen records.

Only `CustomDomainActor` writes these rows; reads (lists, the routing map loaded at
start, the uniqueness check) come here directly. A removed domain keeps its row
with status `removed` and no longer holds its FQDN (a partial unique index).
Also here: the few reads of other kinds' tables this part needs by slug for the TLS
edge's question (`live_slugs`), so that no other module holds SQL of this part.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Row, Transaction

REMOVED = "removed"


@dataclass(frozen=True)
class CustomDomainRecord:
    id: str
    tenant_id: str
    workspace_id: str
    project_id: str
    computer_id: str | None
    deployment_id: str | None
    fqdn: str
    status: str
    verification_target: str
    verified_at: str | None
    tls_issued_at: str | None
    dns_error: str | None
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """Its home: the node whose actor owns the row (`corral.actors.nodes.homed`)."""


DOMAINS: RowStore[CustomDomainRecord] = RowStore("custom_domains", CustomDomainRecord)


def fqdn_taken(tx: Transaction, fqdn: str) -> bool:
    """Whether a domain not removed holds `fqdn`, in any tenant (the spec's "registered anywhere")."""
    return tx.fetch_one("SELECT id FROM custom_domains WHERE fqdn = ? AND status <> ?", (fqdn, REMOVED)) is not None


def insert(tx: Transaction, record: CustomDomainRecord) -> None:
    DOMAINS.insert(tx, record)


async def find(db: Database, tenant_id: str, domain_id: str) -> CustomDomainRecord | None:
    """The tenant's domain, removed ones excluded (they answer 404 like unknown ones)."""
    found = await DOMAINS.where(db, [("id", domain_id), ("tenant_id", tenant_id)], also=f"status <> '{REMOVED}'")
    return found[0] if found else None


async def list_for(
    db: Database, tenant_id: str, *, computer_id: str | None = None, deployment_id: str | None = None,
    within_workspace: str | None = None,
) -> list[CustomDomainRecord]:
    """The tenant's live domains, optionally of one resource or one workspace, oldest first."""
    equal: list[tuple[str, object]] = [("tenant_id", tenant_id)]
    if computer_id is not None:
        equal.append(("computer_id", computer_id))
    if deployment_id is not None:
        equal.append(("deployment_id", deployment_id))
    if within_workspace is not None:
        equal.append(("workspace_id", within_workspace))
    return await DOMAINS.where(db, equal, also=f"status <> '{REMOVED}'", order_by="created_at, id")


async def live(db: Database) -> list[CustomDomainRecord]:
    """Every domain not removed, of every tenant: the routing map at start."""
    return await DOMAINS.where(db, [], also=f"status <> '{REMOVED}'", order_by="created_at, id")


async def homes_of_resource(db: Database, column: str, resource_id: str) -> list[tuple[str, str | None]]:
    """The live domains of a computer (`computer_id`) or a deployment (`deployment_id`):
    each one's id and home node."""
    if column not in ("computer_id", "deployment_id"):
        raise ValueError(column)
    rows = await db.fetch_all(f"SELECT id, node FROM custom_domains WHERE {column} = ? AND status <> ?", (resource_id, REMOVED))
    return [(str(row["id"]), row["node"]) for row in rows]


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a computer or sandbox is: the scopes whose preview domains its hosts may use."""

    tenant_id: str
    workspace_id: str | None
    project_id: str | None


async def live_hosts(db: Database) -> dict[str, dict[str, Owner]]:
    """kind -> slug -> owner of every computer and sandbox not deleted."""
    computers = await db.fetch_all(
        "SELECT slug, tenant_id, workspace_id, project_id FROM computers WHERE status <> 'deleted'"
    )
    sandboxes = await db.fetch_all(
        "SELECT slug, tenant_id, workspace_id, project_id FROM sandboxes WHERE status <> 'destroyed'"
    )
    return {
        "computer": {str(row["slug"]): _owner(row) for row in computers},
        "sandbox": {str(row["slug"]): _owner(row) for row in sandboxes},
    }


async def live_host(db: Database, kind: str, resource_id: str) -> tuple[str, Owner] | None:
    """(slug, owner) of one computer or sandbox, None when it is deleted or unknown."""
    table, gone = {"computer": ("computers", "deleted"), "sandbox": ("sandboxes", "destroyed")}[kind]
    row = await db.fetch_one(
        f"SELECT slug, tenant_id, workspace_id, project_id FROM {table} WHERE id = ? AND status <> ?", (resource_id, gone)
    )
    return None if row is None else (str(row["slug"]), _owner(row))


async def live_host_named(db: Database, kind: str, slug: str) -> Owner | None:
    """The owner of the live computer or sandbox with this slug, None when there is none."""
    table, gone = {"computer": ("computers", "deleted"), "sandbox": ("sandboxes", "destroyed")}[kind]
    row = await db.fetch_one(
        f"SELECT tenant_id, workspace_id, project_id FROM {table} WHERE slug = ? AND status <> ?", (slug, gone)
    )
    return None if row is None else _owner(row)


async def preview_domain_scopes(db: Database) -> dict[str, tuple[str, str]]:
    """Every preview domain a router serves (pending or configured) -> its (scope_type, scope_id)."""
    rows = await db.fetch_all(
        "SELECT domain, scope_type, scope_id FROM preview_domains WHERE status IN ('pending_dns', 'configured')"
    )
    return {str(row["domain"]): (str(row["scope_type"]), str(row["scope_id"])) for row in rows}


def _owner(row: Row) -> Owner:
    return Owner(str(row["tenant_id"]), _text(row["workspace_id"]), _text(row["project_id"]))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


async def deployment_row(db: Database, tenant_id: str, deployment_id: str) -> dict[str, object] | None:
    """The tenant's deployment (not deleted) as the deployments part stores it, or None,
    also when that part's table does not exist on this store."""
    if db.dialect == "sqlite":
        exists = await db.fetch_value("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'deployments'")
    else:
        exists = await db.fetch_value("SELECT count(*) FROM information_schema.tables WHERE table_name = 'deployments'")
    if not exists:
        return None
    row = await db.fetch_one(
        "SELECT id, tenant_id, slug, state, workspace_id, project_id, external_workspace_id, external_user_id,"
        " external_project_id FROM deployments WHERE id = ? AND tenant_id = ? AND state <> 'deleted'",
        (deployment_id, tenant_id),
    )
    return None if row is None else dict(row)
