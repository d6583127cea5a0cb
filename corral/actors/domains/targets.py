"""What a custom domain is attached to: a computer or a deployment, as one shape.

Computers are found through the computers part; deployments are read from the
deployments part's `deployments` table (when the store has one), so the nested and
flat routes work as soon as deployments exist. A deployment's domains inherit its workspace,
project and external attribution (spec "Custom domain").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.actors.computers import ComputerRecord, find_computer
from corral.actors.computers.services import ComputerServices
from corral.errors import ApiError, not_found
from corral.storage import Database

from . import store

COMPUTER, DEPLOYMENT = "computer", "deployment"


@dataclass(frozen=True)
class DomainTarget:
    kind: str
    """`computer` or `deployment`."""
    id: str
    tenant_id: str
    workspace_id: str
    project_id: str
    slug: str
    """Its own host is `{slug}.{public domain}`: the domain's `verification_target`."""
    external_workspace_id: str | None = None
    external_user_id: str | None = None
    external_project_id: str | None = None
    owner_user_id: str | None = None


class DeploymentHosts(Protocol):
    """What the TLS edge's question needs of the deployments part (its `DeploymentSites`)."""

    def live_deployment_host(self, host: str) -> bool:
        """Whether `host` (lowercase, no port) serves a live deployment or version now, from memory."""


def deployment_not_found() -> ApiError:
    return not_found("deployment not found", "DEPLOYMENT_NOT_FOUND")


def computer_target(row: ComputerRecord) -> DomainTarget:
    return DomainTarget(
        kind=COMPUTER, id=row.id, tenant_id=row.tenant_id, workspace_id=row.workspace_id, project_id=row.project_id,
        slug=row.slug, external_workspace_id=row.external_workspace_id, external_user_id=row.external_user_id,
        external_project_id=row.external_project_id, owner_user_id=row.owner_user_id,
    )


async def find_computer_target(platform: ComputerServices, tenant_id: str, computer_id: str, key_workspace_id: str | None) -> DomainTarget:
    """The caller's computer (404 `computer not found` otherwise)."""
    return computer_target(await find_computer(platform, tenant_id, computer_id, key_workspace_id=key_workspace_id))


async def find_deployment_target(
    db: Database, tenant_id: str, deployment_id: str, key_workspace_id: str | None
) -> DomainTarget:
    """The caller's deployment, read from the deployments part's table (404 `DEPLOYMENT_NOT_FOUND` otherwise)."""
    row = await store.deployment_row(db, tenant_id, deployment_id)
    target = None if row is None else DomainTarget(
        kind=DEPLOYMENT, id=str(row["id"]), tenant_id=str(row["tenant_id"]), workspace_id=str(row["workspace_id"]),
        project_id=str(row["project_id"]), slug=str(row["slug"]),
        external_workspace_id=_text(row["external_workspace_id"]), external_user_id=_text(row["external_user_id"]),
        external_project_id=_text(row["external_project_id"]),
    )
    if target is None or (key_workspace_id is not None and target.workspace_id != key_workspace_id):
        raise deployment_not_found()
    return target


def _text(value: object) -> str | None:
    return None if value is None else str(value)
