"""Deployment operations the HTTP layer calls: create, list, get, patch, delete,
versions, promote and rollback (publish is `publish.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from corral.actors.tenancy import store as tenancy_store
from corral.actors.tenancy.store import ProjectRecord
from corral.errors import ApiError, not_found
from corral.ids import prefixed
from corral.models import UNSET, Rule, Unset, model
from corral.storage import utc_now_iso

from . import service_billing, service_store, store
from .actor import DeploymentActor
from .messages import Delete, Get, Logs, Promote, StartService, Update, VersionFailed
from .service_actor import DeploymentServiceActor
from .service_boot import wake_remote
from .services import DeploymentServices
from .sites import public_url, version_url
from .store import DeploymentRecord, VersionRecord

FILTERS = ("workspace_id", "project_id", "external_workspace_id", "external_user_id", "state")
VERSION_FILTERS = ("state", "workspace_id", "external_workspace_id")
VERSIONS_DEFAULT_LIMIT = 20
VERSIONS_MAX_LIMIT = 100

_TEXT = "must be a non-empty string of at most 255 characters"
Text = Annotated[str | None, Rule(max_length=255, message=_TEXT)]


def deployment_not_found() -> ApiError:
    return ApiError(404, "DEPLOYMENT_NOT_FOUND", "deployment not found")


@model
class NewDeployment:
    """A deployment under the path's project (the workspace is the project's)."""

    name: Annotated[str, Rule(max_length=100, message="must be a non-empty string of at most 100 characters")]
    source_type: Literal["sandbox"] = "sandbox"
    auto_deploy: bool = False
    external_workspace_id: Text = None
    external_user_id: Text = None
    external_project_id: Text = None
    metadata: dict[str, Any] | None = None


@model
class DeploymentPatch:
    name: Annotated[str | Unset, Rule(max_length=100, message="must be a non-empty string of at most 100 characters")] = UNSET
    auto_deploy: bool | Unset = UNSET
    metadata: dict[str, Any] | Unset = UNSET
    external_workspace_id: Annotated[str | Unset | None, Rule(max_length=255, message=_TEXT)] = UNSET
    external_user_id: Annotated[str | Unset | None, Rule(max_length=255, message=_TEXT)] = UNSET
    external_project_id: Annotated[str | Unset | None, Rule(max_length=255, message=_TEXT)] = UNSET


@model
class PromoteRequest:
    environment: Annotated[str, Rule(max_length=63, message="must be a non-empty string of at most 63 characters")] = "production"


@model
class RollbackRequest:
    version_id: Annotated[str, Rule(max_length=64, message="must be a version id")]


# -- public shapes ----------------------------------------------------------------------


async def deployment_public(platform: DeploymentServices, deployment: DeploymentRecord) -> dict[str, Any]:
    return {
        "id": deployment.id,
        "name": deployment.name,
        "slug": deployment.slug,
        "state": deployment.state,
        "workspace_id": deployment.workspace_id,
        "project_id": deployment.project_id,
        "active_version_id": deployment.active_version_id,
        "public_url": await public_url(platform.db, platform.settings, deployment),
        "source_type": deployment.source_type,
        "auto_deploy": bool(deployment.auto_deploy),
        "metadata": deployment.metadata,
        "external_workspace_id": deployment.external_workspace_id,
        "external_user_id": deployment.external_user_id,
        "external_project_id": deployment.external_project_id,
        "node": deployment.node,
        "created_at": deployment.created_at,
        "updated_at": deployment.updated_at,
    }


VERSION_FIELDS = (
    "id", "deployment_id", "version_number", "kind", "state", "environment", "source_sandbox_id", "artifact_uri",
    "artifact_sha256", "source_sha256", "artifact_manifest", "runtime_image", "runtime_command", "runtime_port",
    "health_check_path", "build_log_uri", "workspace_id", "project_id", "external_workspace_id", "external_user_id",
    "promoted_at", "created_at", "updated_at",
)


async def version_public(
    platform: DeploymentServices, deployment: DeploymentRecord, version: VersionRecord, *, full: bool = True
) -> dict[str, Any]:
    """A version as the API shows it; in lists (`full=False`) the manifest without its
    `files` (a 1,000-file site would make every page of the list heavy)."""
    public = {name: getattr(version, name) for name in VERSION_FIELDS}
    if not full and version.artifact_manifest is not None:
        public["artifact_manifest"] = {k: v for k, v in version.artifact_manifest.items() if k != "files"}
    public["active"] = version.id == deployment.active_version_id
    public["url"] = await version_url(platform.db, platform.settings, deployment, version)
    if version.error_code:
        public["error"] = {"code": version.error_code, "message": version.error_message}
    return public


async def services_public(platform: DeploymentServices, version: VersionRecord) -> list[dict[str, Any]]:
    """A version's service entries: the router's `static_web` for a static version, the
    `svc_` instance for a service version."""
    if version.kind == "static":
        state = "healthy" if version.state in store.LIVE_VERSION_STATES else "failed"
        return [{"id": "svc_" + version.id.removeprefix("ver_"), "type": "static_web", "state": state}]
    return [service_store.service_public(s) for s in await service_store.services_of_version(platform.db, version.id)]


# -- operations -------------------------------------------------------------------------


async def project_of(
    platform: DeploymentServices, tenant_id: str, project_id: str, *, key_workspace_id: str | None = None
) -> ProjectRecord:
    """The tenant's project (404 `project not found` otherwise: another tenant's, and one
    outside the workspace a restricted key is limited to)."""
    project = await tenancy_store.projects.find(platform.db, tenant_id, project_id)
    if project is None or (key_workspace_id is not None and project.workspace_id != key_workspace_id):
        raise not_found("project not found")
    return project


async def create_deployment(platform: DeploymentServices, tenant_id: str, project_id: str, new: NewDeployment) -> DeploymentRecord:
    project = await project_of(platform, tenant_id, project_id)
    now = utc_now_iso()
    draft = DeploymentRecord(
        id=prefixed("dep"), tenant_id=tenant_id, name=new.name, slug="", state="created",
        workspace_id=project.workspace_id, project_id=project.id, active_version_id=None,
        source_type=new.source_type, auto_deploy=int(new.auto_deploy), metadata=new.metadata or {},
        external_workspace_id=new.external_workspace_id, external_user_id=new.external_user_id,
        external_project_id=new.external_project_id, created_at=now, updated_at=now,
    )
    ref = await platform.system.create(DeploymentActor, draft.id, draft)
    record: DeploymentRecord = await ref.ask(Get())
    return record


async def find_deployment(
    platform: DeploymentServices, tenant_id: str, deployment_id: str, *, key_workspace_id: str | None = None
) -> DeploymentRecord:
    """The tenant's live deployment; 404 for another tenant's, and for one outside the
    workspace a restricted key is limited to."""
    record = await store.find(platform.db, tenant_id, deployment_id)
    if record is None or (key_workspace_id is not None and record.workspace_id != key_workspace_id):
        raise deployment_not_found()
    return record


async def list_deployments(
    platform: DeploymentServices, tenant_id: str, filters: dict[str, str], *, key_workspace_id: str | None = None
) -> list[DeploymentRecord]:
    return await store.list_for_tenant(platform.db, tenant_id, filters, within_workspace=key_workspace_id)


async def update_deployment(platform: DeploymentServices, deployment: DeploymentRecord, patch: DeploymentPatch) -> DeploymentRecord:
    fields = {name: value for name, value in vars(patch).items() if not isinstance(value, Unset)}
    if "auto_deploy" in fields:
        fields["auto_deploy"] = int(fields["auto_deploy"])
    if "metadata" in fields and fields["metadata"] is None:
        fields["metadata"] = {}
    ref = await platform.system.get(DeploymentActor, deployment.id)
    record: DeploymentRecord = await ref.ask(Update(fields))
    return record


async def delete_deployment(platform: DeploymentServices, deployment: DeploymentRecord) -> DeploymentRecord:
    ref = await platform.system.get(DeploymentActor, deployment.id)
    record: DeploymentRecord = await ref.ask(Delete(), timeout=120)
    return record


async def find_version(platform: DeploymentServices, deployment: DeploymentRecord, version_id: str) -> VersionRecord:
    version = await store.version(platform.db, deployment.id, version_id)
    if version is None:
        raise not_found("version not found", "VERSION_NOT_FOUND")
    return version


async def list_versions(
    platform: DeploymentServices, deployment: DeploymentRecord, filters: dict[str, str], limit: int, cursor: str | None
) -> tuple[list[VersionRecord], str | None]:
    return await store.versions_page(platform.db, deployment.id, filters, limit, cursor)


async def promote(
    platform: DeploymentServices, deployment: DeploymentRecord, version_id: str, *, environment: str = "production", rollback: bool = False
) -> tuple[DeploymentRecord, VersionRecord]:
    version = await find_version(platform, deployment, version_id)
    if version.kind == "service" and environment == "production":
        await _wake_service(platform, deployment, version)
    ref = await platform.system.get(DeploymentActor, deployment.id)
    promoted: VersionRecord = await ref.ask(Promote(version_id, rollback=rollback, environment=environment))
    record: DeploymentRecord = await ref.ask(Get())
    return record, promoted


async def _wake_service(platform: DeploymentServices, deployment: DeploymentRecord, version: VersionRecord) -> None:
    """A service its tenant's credits stopped starts again when its version is promoted:
    here through its actor, or, on another node, by that node (`service_boot.wake_remote`)."""
    stopped = await service_store.stopped_service_of(platform.db, version.id)
    if stopped is None:
        return
    await service_billing.allow_run(platform, deployment.tenant_id, stopped.size, stopped.external_user_id, stopped.id)
    if stopped.node not in (None, platform.settings.node_name):
        await wake_remote(platform.db, stopped)
        return
    ref = await platform.system.get(DeploymentServiceActor, stopped.id)
    await ref.ask(StartService(), timeout=120)


async def service_logs(platform: DeploymentServices, deployment: DeploymentRecord, service_id: str, tail: int) -> dict[str, Any]:
    service = await service_store.load(platform.db, service_id)
    if service is None or service.deployment_id != deployment.id:
        raise not_found("deployment service not found")
    ref = await platform.system.get(DeploymentServiceActor, service.id)
    result: dict[str, Any] = await ref.ask(Logs(tail))
    return result


async def fail_interrupted(
    platform: DeploymentServices, nodes: Sequence[str] | None = None, why: str = "the control plane stopped during the publish"
) -> int:
    """A publish cut off by a stop of this node (at start-up), or by the loss of one of
    `nodes` (`why` says so), failed (`PUBLISH_INTERRUPTED`); production kept serving
    what it served. Another live node's publishes under way are its own."""
    at_start = nodes is None
    versions = await store.interrupted_versions(platform.db, nodes or [platform.settings.node_name], unrecorded=at_start)
    for version in versions:
        ref = await platform.system.get(DeploymentActor, version.deployment_id)
        with contextlib.suppress(ApiError):  # its deployment was deleted meanwhile
            await ref.ask(VersionFailed(version.id, "PUBLISH_INTERRUPTED", why))
    return len(versions)
