"""Deployments: publish a sandbox into immutable versions, promote, roll back (contract §12).

Modules, one job each:

- `store`: the deployment and version rows (frozen records); `service_store`: services;
- `actor`: `DeploymentActor`, owner of one deployment, its versions and active pointer;
- `service_actor`: `DeploymentServiceActor`, the `svc_` kind of the instance base;
- `artifacts`: deterministic tar packing from the host side of an instance's root;
- `publish`: the synchronous publish (build, pack, upload, service, promote);
- `static_site`, `sites`: the router's in-memory table of deployment hosts, static serving;
- `service`: the operations the HTTP routes call.
"""

from . import artifacts, service_billing, service_store, store
from .actor import DeploymentActor
from .credits import register_with_billing
from .messages import Delete, Get, Logs, NewVersion, Promote, Update
from .publish import (
    Published,
    PublishRequest,
    SandboxPublishRequest,
    publish,
    publish_request_for,
    resolved_kind,
    sandbox_of,
)
from .service import (
    FILTERS,
    VERSION_FILTERS,
    VERSIONS_DEFAULT_LIMIT,
    VERSIONS_MAX_LIMIT,
    DeploymentPatch,
    NewDeployment,
    PromoteRequest,
    RollbackRequest,
    create_deployment,
    delete_deployment,
    deployment_not_found,
    deployment_public,
    fail_interrupted,
    find_deployment,
    find_version,
    list_deployments,
    list_versions,
    project_of,
    promote,
    service_logs,
    services_public,
    update_deployment,
    version_public,
)
from .service_actor import DeploymentServiceActor
from .service_boot import placed_services_forever
from .service_moves import relocate_forever
from .service_store import ServiceRecord
from .services import DeploymentServices
from .sites import DeploymentSites, deployment_host, public_url, version_url
from .store import DeploymentRecord, VersionRecord

ACTORS = (DeploymentActor, DeploymentServiceActor)
"""The package's actor kinds, registered by the node before anything refers to them by kind."""

EVENT_TYPES = ("deployment.*",)
"""What `GET /deployments/{id}/events` streams: publish progress, succeeded, failed, rollback."""

__all__ = [
    "ACTORS",
    "EVENT_TYPES",
    "FILTERS",
    "VERSIONS_DEFAULT_LIMIT",
    "VERSIONS_MAX_LIMIT",
    "VERSION_FILTERS",
    "Delete",
    "DeploymentActor",
    "DeploymentPatch",
    "DeploymentRecord",
    "DeploymentServiceActor",
    "DeploymentServices",
    "DeploymentSites",
    "Get",
    "Logs",
    "NewDeployment",
    "NewVersion",
    "Promote",
    "PromoteRequest",
    "PublishRequest",
    "Published",
    "RollbackRequest",
    "SandboxPublishRequest",
    "ServiceRecord",
    "Update",
    "VersionRecord",
    "artifacts",
    "create_deployment",
    "delete_deployment",
    "deployment_host",
    "deployment_not_found",
    "deployment_public",
    "fail_interrupted",
    "find_deployment",
    "find_version",
    "list_deployments",
    "list_versions",
    "placed_services_forever",
    "project_of",
    "promote",
    "public_url",
    "publish",
    "publish_request_for",
    "register_with_billing",
    "relocate_forever",
    "resolved_kind",
    "sandbox_of",
    "service_billing",
    "service_logs",
    "service_store",
    "services_public",
    "store",
    "update_deployment",
    "version_public",
    "version_url",
]
