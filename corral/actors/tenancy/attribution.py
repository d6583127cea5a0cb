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

from corral.errors import ApiError, forbidden, validation_error
from corral.models import Rule, model
from corral.storage import Database, Transaction

from . import store
from .slugs import SLUG
from .store import ProjectRecord, WorkspaceRecord
from .workspaces import free_project_slug, free_workspace_slug, open_workspace

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


_TEXT = "must be a non-empty string of at most 255 characters"
Text = Annotated[str | None, Rule(max_length=255, message=_TEXT)]
Id = Annotated[str | None, Rule(max_length=255, format="uuid", message="must be a UUID")]
Slug = Annotated[str | None, Rule(pattern=SLUG, message="must be a DNS label (lowercase letters, digits, hyphens)")]


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
    db: Database,
    tenant_id: str | None,
    placement: Placement,
    creator_id: str | None = None,
    *,
    key_workspace_id: str | None = None,
) -> Attribution:
    """The workspace and project of a new resource. A key restricted to one workspace
    (`key_workspace_id`) creates there: naming another (by id, or any slug or name,
    which could create one) is 403, before anything is created."""
    if tenant_id is None:
        raise tenant_resolution_failed()
    fields = {field.name: getattr(placement, field.name) for field in dataclasses.fields(Placement)}
    if key_workspace_id is not None:
        named = fields["workspace_id"]
        if (named and named != key_workspace_id) or fields["workspace_slug"] or fields["workspace_name"]:
            raise forbidden("this key is restricted to one workspace; give its workspace_id or none")
        fields["workspace_id"] = key_workspace_id

    def work(tx: Transaction) -> Attribution:
        workspace = _workspace(tx, tenant_id, fields, creator_id)
        project = _project(tx, workspace, fields)
        return Attribution(tenant_id, workspace.id, project.id, *(fields[name] for name in EXTERNAL_FIELDS))

    return await db.transaction(work)


def _workspace(tx: Transaction, tenant_id: str, fields: dict[str, str | None], creator_id: str | None) -> WorkspaceRecord:
    if fields["workspace_id"]:
        workspace = store.workspaces.find_in(tx, tenant_id, fields["workspace_id"])
        if workspace is None:
            raise validation_error({"workspace_id": "no such workspace in this tenant"})
        return workspace
    if fields["workspace_slug"] or fields["workspace_name"]:
        if fields["workspace_slug"]:
            slug = fields["workspace_slug"]
            found = store.workspaces.by_slug(tx, tenant_id, slug)
        else:
            found = store.workspaces.by_name(tx, tenant_id, str(fields["workspace_name"]))
            slug = found.slug if found else free_workspace_slug(tx, tenant_id, str(fields["workspace_name"]))
        return found or open_workspace(tx, tenant_id, fields["workspace_name"] or slug, slug, creator_id)
    default = store.workspaces.default(tx, tenant_id)
    if default is None:
        raise tenant_resolution_failed()
    return default


def _project(tx: Transaction, workspace: WorkspaceRecord, fields: dict[str, str | None]) -> ProjectRecord:
    if fields["project_id"]:
        project = store.projects.find_in(tx, workspace.id, fields["project_id"])
        if project is None:
            raise validation_error({"project_id": "no such project in this workspace"})
        return project
    if fields["project_slug"] or fields["project_name"]:
        if fields["project_slug"]:
            slug = fields["project_slug"]
            found = store.projects.by_slug(tx, workspace.id, slug)
        else:
            found = store.projects.by_name(tx, workspace.id, str(fields["project_name"]))
            slug = found.slug if found else free_project_slug(tx, workspace.id, str(fields["project_name"]))
        return found or store.projects.create(tx, workspace, fields["project_name"] or slug, slug)
    default = store.projects.default(tx, workspace.id)
    if default is None:
        default = store.projects.create(tx, workspace, "Default", "default", is_default=True)
    return default
