"""The deployment actor: owns one deployment's row, its versions and its active pointer.

States (contract §12): created -> running (a version promoted) ; any -> deleted.
Versions: created -> building -> ready | failed; ready -> archived when another is
promoted; archived -> ready when promoted again (rollback). Every change of the
active pointer is one transaction and then one swap in the router's table
(`DeploymentSites.reload`), so a request sees the old or the new version, never an
error. Long work (build, packing, health checks) runs in the publishing request's
task (`publish.py`), which reports each step here.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral.actors.actor import handles
from corral.actors.nodes.homed import HomedActor
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError, conflict, not_found
from corral.ids import prefixed
from corral.storage import Transaction, utc_now_iso

from . import service_store, store
from .messages import (
    Delete,
    Get,
    NewVersion,
    Promote,
    StopService,
    Update,
    VersionBuilding,
    VersionDone,
    VersionFailed,
)
from .service_actor import DeploymentServiceActor
from .store import DEPLOYMENTS, DeploymentRecord, VersionRecord

LIVE = ("created", "running")


def version_not_ready() -> ApiError:
    return conflict("VERSION_NOT_READY", "only a ready or archived version can be promoted")


class Sites(Protocol):
    """What the actor needs of the router's table: re-read one deployment."""

    async def reload(self, deployment_id: str) -> None: ...


class DeploymentActor(HomedActor):
    kind = "deployment"
    store = DEPLOYMENTS
    record: DeploymentRecord
    state_column = "state"
    gone_states = ("deleted",)
    transitions = TransitionTable(
        {
            (LIVE, Update): "same",
            (LIVE, NewVersion): "same",
            (LIVE, VersionBuilding): "same",
            (LIVE, VersionDone): "same",
            (LIVE, VersionFailed): "same",
            (LIVE, Promote): "running",
            (LIVE, Delete): "deleted",
        },
    )

    def not_found(self) -> ApiError:
        return ApiError(404, "DEPLOYMENT_NOT_FOUND", "deployment not found")

    async def create_record(self, draft: DeploymentRecord) -> DeploymentRecord:
        def work(tx: Transaction) -> DeploymentRecord:
            record = DEPLOYMENTS.replaced(draft, {"slug": store.new_slug(tx, draft.name), "node": self.services.settings.node_name})
            store.insert(tx, record)
            return record

        record = await self.db.transaction(work)
        self.tenant_id = record.tenant_id
        return record

    def transition(self, message: Any) -> str:
        if self.state == "deleted":
            raise self.not_found()
        return super().transition(message)

    @property
    def sites(self) -> Sites | None:
        sites: Sites | None = getattr(self.services, "deployment_sites", None)
        return sites

    async def _reload(self) -> None:
        if self.sites is not None:
            await self.sites.reload(self.id)

    # -- the deployment ---------------------------------------------------------------

    @handles(Get)
    async def get(self, message: Get) -> DeploymentRecord:
        if self.state == "deleted":
            raise self.not_found()
        return self.record

    @handles(Update)
    async def update(self, message: Update) -> DeploymentRecord:
        self.transition(message)
        await self.persist(**message.fields)
        await self._reload()
        return self.record

    @handles(Delete)
    async def delete(self, message: Delete) -> DeploymentRecord:
        next_state = self.transition(message)
        await self.persist(state=next_state)
        await self._reload()  # unrouted before the services go
        here = self.services.settings.node_name
        for service in await service_store.live_services_of_deployment(self.db, self.id):
            if service.node not in (None, here):
                continue  # its own node stops it (`service_boot.PlacedServices`)
            await (await self.services.system.get(DeploymentServiceActor, service.id)).ask(StopService(), timeout=120)
        await self.emit("deleted", {"deployment_id": self.id})
        return self.record

    # -- versions ---------------------------------------------------------------------

    @handles(NewVersion)
    async def new_version(self, message: NewVersion) -> VersionRecord:
        self.transition(message)
        now = utc_now_iso()
        record = self.record

        def work(tx: Transaction) -> VersionRecord:
            values = {
                "source_sandbox_id": None, "artifact_uri": None, "artifact_sha256": None, "source_sha256": None,
                "artifact_manifest": None, "runtime_image": None, "runtime_command": None, "runtime_port": None,
                "health_check_path": None, "build_log_uri": None, "error_code": None, "error_message": None,
                "external_workspace_id": record.external_workspace_id, "external_user_id": record.external_user_id,
                "promoted_at": None, **message.values,
            }
            version = VersionRecord(
                id=prefixed("ver"),
                deployment_id=self.id,
                tenant_id=record.tenant_id,
                version_number=store.next_version_number(tx, self.id),
                state="created",
                workspace_id=record.workspace_id,
                project_id=record.project_id,
                created_at=now,
                updated_at=now,
                node=self.services.settings.node_name,
                **values,
            )
            store.insert_version(tx, version)
            return version

        version = await self.db.transaction(work)
        await self.emit("publish.queued", {"version_id": version.id, "deployment_id": self.id})
        return version

    async def _version(self, version_id: str) -> VersionRecord:
        version = await store.version(self.db, self.id, version_id)
        if version is None:
            raise not_found("version not found", "VERSION_NOT_FOUND")
        return version

    @handles(VersionBuilding)
    async def building(self, message: VersionBuilding) -> VersionRecord:
        self.transition(message)
        await store.update_version(self.db, message.version_id, {"state": "building"})
        return await self._version(message.version_id)

    @handles(VersionFailed)
    async def failed(self, message: VersionFailed) -> VersionRecord:
        self.transition(message)
        values = {**message.values, "state": "failed", "error_code": message.code, "error_message": message.message[:2000]}
        await store.update_version(self.db, message.version_id, values)
        data = {"version_id": message.version_id, "deployment_id": self.id, "error_code": message.code, "message": message.message}
        await self.emit("publish.failed", data)
        await self.emit("failed", data)
        return await self._version(message.version_id)

    @handles(VersionDone)
    async def done(self, message: VersionDone) -> tuple[VersionRecord, bool]:
        self.transition(message)
        await store.update_version(self.db, message.version_id, {**message.values, "state": "ready"})
        await self._reload()  # its own URL serves before production does
        if message.promote:
            await self.emit("publish.promoting", {"version_id": message.version_id, "deployment_id": self.id})
            await self._switch(message.version_id, "succeeded")
        return await self._version(message.version_id), message.promote

    @handles(Promote)
    async def promote(self, message: Promote) -> VersionRecord:
        next_state = self.transition(message)
        version = await self._version(message.version_id)
        if version.state not in store.LIVE_VERSION_STATES:
            raise version_not_ready()
        if message.environment == "production":
            await self._switch(version.id, "rollback" if message.rollback else "succeeded", previous=self.record.active_version_id)
            self.state = next_state
        else:
            await store.update_version(self.db, version.id, {"environment": message.environment})
            await self._reload()
        return await self._version(version.id)

    async def _switch(self, version_id: str, webhook: str, previous: str | None = None) -> None:
        """The active pointer moves in one transaction, then the router's table in one swap."""
        old = self.record.active_version_id
        now = utc_now_iso()
        await self.db.transaction(lambda tx: store.switch_active(tx, self.id, old, version_id, now))
        self.record = DEPLOYMENTS.replaced(self.record, {"active_version_id": version_id, "state": "running", "updated_at": now})
        self.state = "running"
        self.mark_persisted()
        await self._reload()
        version = await self._version(version_id)
        data: dict[str, Any] = {
            "deployment_id": self.id, "version_id": version_id, "version_number": version.version_number,
        }
        if webhook == "rollback":
            data["previous_version_id"] = previous
        await self.emit(webhook, data)
