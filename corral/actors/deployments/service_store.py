"""The `deployment_services` table: every query about deployment services (`svc_`).

Reads are for anyone in the package; writes are the deployment service actor's.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.record import RowStore
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """One deployment service: an instance running one version's `run_command`."""

    id: str
    tenant_id: str
    deployment_id: str
    version_id: str
    type: str
    status: str
    slug: str
    template_id: str
    size: str
    run_command: str
    port: int
    health_check_path: str
    artifact_sha256: str
    process_id: str | None
    restarts: int
    owner_user_id: str | None
    external_user_id: str | None
    error: str | None
    last_activity_at: str | None
    created_at: str
    updated_at: str
    node: str | None = None
    """The node that runs it (`corral.actors.nodes`); null for rows made before nodes."""
    wake_requested_at: str | None = None
    """Another node asked for this stopped service to start again (`service_boot`)."""


SERVICES = RowStore("deployment_services", ServiceRecord)

PUBLIC_STATES = {"starting": "starting", "running": "healthy", "stopped": "stopped", "error": "failed", "destroyed": "removed"}
"""The row's status (the instance base's words) as a service entry's `state`."""


def service_public(service: ServiceRecord) -> dict[str, object]:
    return {
        "id": service.id, "type": service.type, "state": PUBLIC_STATES.get(service.status, service.status),
        "version_id": service.version_id, "restarts": service.restarts, "error": service.error, "node": service.node,
    }


async def load(db: Database, service_id: str) -> ServiceRecord | None:
    return await SERVICES.load(db, service_id)


async def running_service_of(db: Database, version_id: str) -> ServiceRecord | None:
    """The version's running service (the newest), if any."""
    found = await SERVICES.where(db, [("version_id", version_id)], also="status = 'running'")
    return found[0] if found else None


async def stopped_service_of(db: Database, version_id: str) -> ServiceRecord | None:
    """The version's service stopped when its tenant's credits ran out, if any."""
    found = await SERVICES.where(db, [("version_id", version_id)], also="status = 'stopped'")
    return found[0] if found else None


async def services_of_version(db: Database, version_id: str) -> list[ServiceRecord]:
    return await SERVICES.where(db, [("version_id", version_id)])


async def live_services_of_deployment(db: Database, deployment_id: str) -> list[ServiceRecord]:
    return await SERVICES.where(db, [("deployment_id", deployment_id)], also="status != 'destroyed'")


async def live_services(db: Database) -> list[ServiceRecord]:
    return SERVICES.records(await db.fetch_all("SELECT * FROM deployment_services WHERE status != 'destroyed'"))


def insert(tx: Transaction, record: ServiceRecord) -> None:
    SERVICES.insert(tx, record)
