"""Attribution: which workspace and project a new resource belongs to.

Rules (issue 2, item 6): `workspace_id` names an existing workspace of the tenant;
otherwise `workspace_slug` (by slug) / `workspace_name` (by name, any case) name an
existing workspace or create one; otherwise the tenant default. Projects likewise
within the chosen workspace. The external ids are opaque strings carried through.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from corral.errors import ApiError, validation_error
from corral.models import Rule, model
from corral.storage import Database, Row, Transaction

from .slugs import is_slug, slugify
from .tenants import add_workspace_member, insert_project, insert_workspace
from .workspaces import _free_slug as free_slug

_WORKSPACE_SLUG_USED = "SELECT 1 FROM workspaces WHERE tenant_id = ? AND slug = ?"
_PROJECT_SLUG_USED = "SELECT 1 FROM projects WHERE workspace_id = ? AND slug = ?"

EXTERNAL_FIELDS = ("external_workspace_id", "external_user_id", "external_project_id")


def tenant_resolution_failed() -> ApiError:
    return ApiError(422, "TENANT_RESOLUTION_FAILED", "tenant cannot be determined for the caller")


@dataclass(frozen=True)
class Attribution:
    tenant_id: str
    workspace_id: str
    project_id: str
    external_workspace_id: str | None = None
    external_user_id: str | None = None
    external_project_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, resource: Any) -> Attribution:
        """The attribution a resource's record already has (a fork or a clone keeps it)."""
        return cls(**{name: getattr(resource, name) for name in cls.__dataclass_fields__})


def _slug_problem(value: str) -> str | None:
    return None if is_slug(value) else "must be a DNS label (lowercase letters, digits, hyphens)"


_TEXT = "must be a non-empty string of at most 255 characters"
Text = Annotated[str | None, Rule(max_length=255, message=_TEXT)]
Id = Annotated[str | None, Rule(max_length=255, format="uuid", message="must be a UUID")]
Slug = Annotated[str | None, Rule(max_length=255, check=_slug_problem)]


@model
class Placement:
    """Where a new resource belongs: the fields every create body shares.

    `workspace_id` names an existing workspace of the tenant; otherwise
    `workspace_slug` / `workspace_name` name an existing one or create it; otherwise
    the tenant's default. Projects likewise, within the chosen workspace.
    """

    workspace_id: Id = None
    workspace_slug: Slug = None
    workspace_name: Text = None
    project_id: Id = None
    project_slug: Slug = None
    project_name: Text = None
    external_workspace_id: Text = None
    external_user_id: Text = None
    external_project_id: Text = None


async def resolve_attribution(
    db: Database, tenant_id: str | None, placement: Placement, creator_id: str | None = None
) -> Attribution:
    if tenant_id is None:
        raise tenant_resolution_failed()
    fields = {field.name: getattr(placement, field.name) for field in dataclasses.fields(Placement)}

    def work(tx: Transaction) -> Attribution:
        workspace = _workspace(tx, tenant_id, fields, creator_id)
        project = _project(tx, workspace, fields)
        return Attribution(
            tenant_id, workspace["id"], project["id"], *(fields[name] for name in EXTERNAL_FIELDS)
        )

    return await db.transaction(work)


def _workspace(tx: Transaction, tenant_id: str, fields: dict[str, str | None], creator_id: str | None) -> Row:
    if fields["workspace_id"]:
        row = tx.fetch_one("SELECT * FROM workspaces WHERE id = ? AND tenant_id = ?", (fields["workspace_id"], tenant_id))
        if row is None:
            raise validation_error({"workspace_id": "no such workspace in this tenant"})
        return row
    if fields["workspace_slug"] or fields["workspace_name"]:
        if fields["workspace_slug"]:
            slug = fields["workspace_slug"]
            row = tx.fetch_one("SELECT * FROM workspaces WHERE tenant_id = ? AND slug = ?", (tenant_id, slug))
        else:
            row = _by_name(tx, "workspaces", "tenant_id", tenant_id, str(fields["workspace_name"]))
            slug = row["slug"] if row else free_slug(tx, _WORKSPACE_SLUG_USED, tenant_id, slugify(str(fields["workspace_name"]), "workspace"))
        if row is None:
            row = insert_workspace(tx, tenant_id, fields["workspace_name"] or slug, slug)
            if creator_id is not None:
                add_workspace_member(tx, row["id"], creator_id, "owner", creator_id)
            insert_project(tx, row, "Default", "default", is_default=True)
        return row
    row = tx.fetch_one("SELECT * FROM workspaces WHERE tenant_id = ? AND is_default = 1", (tenant_id,))
    if row is None:
        raise tenant_resolution_failed()
    return row


def _project(tx: Transaction, workspace: Row, fields: dict[str, str | None]) -> Row:
    if fields["project_id"]:
        row = tx.fetch_one("SELECT * FROM projects WHERE id = ? AND workspace_id = ?", (fields["project_id"], workspace["id"]))
        if row is None:
            raise validation_error({"project_id": "no such project in this workspace"})
        return row
    if fields["project_slug"] or fields["project_name"]:
        if fields["project_slug"]:
            slug = fields["project_slug"]
            row = tx.fetch_one("SELECT * FROM projects WHERE workspace_id = ? AND slug = ?", (workspace["id"], slug))
        else:
            row = _by_name(tx, "projects", "workspace_id", workspace["id"], str(fields["project_name"]))
            slug = row["slug"] if row else free_slug(tx, _PROJECT_SLUG_USED, workspace["id"], slugify(str(fields["project_name"]), "project"))
        return row or insert_project(tx, workspace, fields["project_name"] or slug, slug)
    row = tx.fetch_one("SELECT * FROM projects WHERE workspace_id = ? AND is_default = 1", (workspace["id"],))
    if row is None:
        row = insert_project(tx, workspace, "Default", "default", is_default=True)
    return row


def _by_name(tx: Transaction, table: str, scope: str, scope_id: str, name: str) -> Row | None:
    """The oldest record named `name` (any case), so a name keeps finding a renamed-slug record."""
    return tx.fetch_one(
        f"SELECT * FROM {table} WHERE {scope} = ? AND lower(name) = lower(?) ORDER BY created_at, id LIMIT 1",
        (scope_id, name),
    )

