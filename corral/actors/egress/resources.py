"""The sandboxes and computers secrets are bound to, as far as the vault needs them.

A binding names its resource by id and type; the vault reads the identity columns
(tenant, workspace, owner, external ids) to check it exists in the tenant and to
decide which scope-wide bindings apply to it. The SQL reads the two tables directly
(they are the instance kinds' rows; this package never writes them), so that the
instance kinds can import this package for their env without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.errors import not_found
from corral.storage import Database

_TABLES = {"sandbox": ("sandboxes", "status != 'destroyed'"), "computer": ("computers", "TRUE")}


class Resource(Protocol):
    """A sandbox or computer record (both have these columns)."""

    @property
    def id(self) -> str: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def workspace_id(self) -> str: ...
    @property
    def owner_user_id(self) -> str | None: ...
    @property
    def external_user_id(self) -> str | None: ...
    @property
    def external_workspace_id(self) -> str | None: ...


@dataclass(frozen=True)
class ResourceIdentity:
    id: str
    tenant_id: str
    workspace_id: str
    owner_user_id: str | None
    external_user_id: str | None
    external_workspace_id: str | None


async def find_resource(
    db: Database, tenant_id: str | None, resource_type: str, resource_id: str
) -> ResourceIdentity | None:
    """The live resource, in `tenant_id` (any tenant with None: the proxy knows only the instance)."""
    table, live = _TABLES[resource_type]
    tenant_clause = " AND tenant_id = ?" if tenant_id is not None else ""
    row = await db.fetch_one(
        "SELECT id, tenant_id, workspace_id, owner_user_id, external_user_id, external_workspace_id"
        f" FROM {table} WHERE id = ? AND {live}{tenant_clause}",
        (resource_id, tenant_id) if tenant_id is not None else (resource_id,),
    )
    return None if row is None else ResourceIdentity(**row)


async def resource_of_instance(db: Database, instance_id: str) -> tuple[str, ResourceIdentity] | None:
    """The sandbox (whose instance id is its own id) or computer (its `instance_id`
    column) running as instance `instance_id`, with its type: what the proxy knows of
    a connection is the instance it comes from."""
    columns = "id, tenant_id, workspace_id, owner_user_id, external_user_id, external_workspace_id"
    row = await db.fetch_one(f"SELECT {columns} FROM sandboxes WHERE id = ? AND status != 'destroyed'", (instance_id,))
    if row is not None:
        return "sandbox", ResourceIdentity(**row)
    row = await db.fetch_one(f"SELECT {columns} FROM computers WHERE instance_id = ?", (instance_id,))
    return None if row is None else ("computer", ResourceIdentity(**row))


async def require_resource(db: Database, tenant_id: str, resource_type: str, resource_id: str) -> ResourceIdentity:
    found = await find_resource(db, tenant_id, resource_type, resource_id)
    if found is None:
        raise not_found(f"{resource_type} not found")
    return found


def in_scope(scope: str, scope_key: str, resource: Resource) -> bool:
    """Whether a secret of `scope` (identity `scope_key`) covers `resource`."""
    if scope == "tenant":
        return True
    value = {
        "workspace": resource.workspace_id,
        "user": resource.owner_user_id,
        "external_user": resource.external_user_id,
        "external_workspace": resource.external_workspace_id,
    }.get(scope)
    return value is not None and value == scope_key
