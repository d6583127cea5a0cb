"""A deployment service's boot, on the node placement chose for it (issue 30).

A publish runs on its source sandbox's node, but the service it starts goes to a node
with room (`corral.actors.nodes.placement`, like a sandbox of its size). On that node
the service's actor boots it and waits until it is healthy or has failed; a service
that did not come up is stopped there, so its instance goes with its version
(`boot_until_settled`). When placement chose another node, the publish writes the
service's row naming that node, and that node, which looks for such rows every
`ROUND_SECONDS` (`placed_services_forever`), boots it; the publish follows the row until
it is `running` or has failed (`settled_row`). The caller cannot tell which node runs
the service, except by `node`.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import trio

from corral.actors.instances import Boot, Get
from corral.actors.nodes import claims
from corral.actors.periodic import run_periodically
from corral.actors.ref import ActorRef
from corral.errors import ApiError
from corral.storage import Database, utc_now_iso

from . import service_store
from .messages import StartService, StopService
from .service_actor import DeploymentServiceActor
from .service_store import ServiceRecord
from .services import DeploymentServices

log = logging.getLogger("corral.deployments.services")

SERVICE_WAIT = 75.0
"""Seconds a service has to become healthy: the 60 s health check and the instance's boot."""
STOP_WAIT = 60.0
ROUND_SECONDS = 0.5
"""How often a node looks for services placed on it (a publish waits that much more)."""
POLL_SECONDS = 0.2


async def boot_until_settled(ref: ActorRef[DeploymentServiceActor]) -> ServiceRecord:
    """Boot the service, wait until it is `running` or has failed (`SERVICE_WAIT` at
    most), and stop one that did not come up; the record as it ends."""
    await ref.ask(Boot())
    with trio.move_on_after(SERVICE_WAIT):
        while True:
            current: ServiceRecord = await ref.ask(Get())
            if current.status != "starting":
                break
            await trio.sleep(POLL_SECONDS)
    current = await ref.ask(Get())
    if current.status in ("starting", "error"):  # its instance goes with its version
        failed = current if current.error else service_store.SERVICES.replaced(current, {"error": "the service did not start in time"})
        with contextlib.suppress(Exception):
            await ref.ask(StopService(), timeout=STOP_WAIT)
        return failed
    return current


async def settled_row(db: Database, service_id: str) -> ServiceRecord | None:
    """Follow a service another node boots (`placed_services_forever`) until it is running or
    has failed; None when its row went (its deployment was deleted)."""
    with trio.move_on_after(SERVICE_WAIT + STOP_WAIT + 2 * ROUND_SECONDS):
        while True:
            row = await service_store.load(db, service_id)
            if row is None or row.status != "starting":
                return row
            await trio.sleep(POLL_SECONDS)
    # Its node never took it up (it died meanwhile): it is not to start later, for a
    # version that failed. Only a row still untouched is changed.
    await db.execute(
        "UPDATE deployment_services SET status = 'error', error = ? WHERE id = ? AND status = 'starting' AND process_id IS NULL",
        ("its node did not start it in time", service_id),
    )
    return await service_store.load(db, service_id)


async def boot_where_placed(platform: DeploymentServices, service: ServiceRecord, claim_id: str | None) -> ServiceRecord | None:
    """Boot the new `service` on the node its row names and follow it until it runs or
    has failed; the record as it ends (None: its row went). Here its actor boots it; on
    another node the row is written and that node boots it (`PlacedServices`). The
    placement's claim (`claim_id`) counts until the row exists, and is released after."""
    db = platform.db
    try:
        if claim_id is not None:
            with claims.holding(claim_id):
                await claims.bind(db, service.id)
        if service.node in (None, platform.settings.node_name):
            ref = await platform.system.create(DeploymentServiceActor, service.id, service)
            return await boot_until_settled(ref)
        await db.transaction(lambda tx: service_store.insert(tx, service))
        return await settled_row(db, service.id)
    finally:
        if claim_id is not None:
            with trio.CancelScope(shield=True):
                await claims.release(db, claim_id)


async def wake_remote(db: Database, service: ServiceRecord) -> None:
    """Start again a stopped service another node runs (a promote of its version through
    this node): ask for it on its row, which its node reads (`PlacedServices`), and wait
    until it runs, or 503 when it did not start (or its node did not take it up)."""
    asked = utc_now_iso()
    changed = await db.execute(
        "UPDATE deployment_services SET wake_requested_at = ? WHERE id = ? AND status = 'stopped'", (asked, service.id)
    )
    if not changed:  # started (or removed) meanwhile: nothing to wake
        return
    with trio.move_on_after(SERVICE_WAIT + 2 * ROUND_SECONDS):
        while True:
            row = await service_store.load(db, service.id)
            if row is None or row.status != "stopped" or row.wake_requested_at is None:
                break
            await trio.sleep(POLL_SECONDS)
    row = await service_store.load(db, service.id)
    if row is None or row.status != "running":
        await db.execute("UPDATE deployment_services SET wake_requested_at = NULL WHERE id = ? AND wake_requested_at = ?", (service.id, asked))
        raise ApiError(503, "SERVICE_UNAVAILABLE", f"the deployment service did not start again on node {service.node}")


class PlacedServices:
    """This node's services that another node's actors cannot reach: those placed here
    by a publish on another node, booted here; stopped ones a promote through another
    node wakes, started here; and those of a deployment deleted through another node,
    stopped here."""

    def __init__(self, platform: DeploymentServices) -> None:
        self.platform = platform
        self.booting: set[str] = set()

    async def round(self, nursery: trio.Nursery) -> int:
        """Start booting each service placed here that no actor here boots yet, and stop
        each live one of a deleted deployment; returns how many it started to boot."""
        await self._stop_deleted()
        await self._wake_asked(nursery)
        here = self.platform.settings.node_name
        rows = await self.platform.db.fetch_all(
            "SELECT id FROM deployment_services WHERE node = ? AND status = 'starting'", (here,)
        )
        started = 0
        for row in rows:
            service_id = str(row["id"])
            if service_id in self.booting or self.platform.system.introspect_one(DeploymentServiceActor.kind, service_id):
                continue  # booting here already (the publish's own, or one this node started)
            self.booting.add(service_id)
            nursery.start_soon(self._boot, service_id)
            started += 1
        return started

    async def _stop_deleted(self) -> None:
        rows = await self.platform.db.fetch_all(
            "SELECT s.id FROM deployment_services s JOIN deployments d ON d.id = s.deployment_id"
            " WHERE s.node = ? AND s.status <> 'destroyed' AND d.state = 'deleted'",
            (self.platform.settings.node_name,),
        )
        for row in rows:
            service_id = str(row["id"])
            if service_id in self.booting:
                continue  # stopped once its boot has settled
            try:
                ref = await self.platform.system.get(DeploymentServiceActor, service_id)
                await ref.ask(StopService(), timeout=STOP_WAIT)
                log.info("deployment service %s of a deleted deployment stopped", service_id)
            except Exception as exc:
                log.warning("deployment service %s of a deleted deployment was not stopped: %s", service_id, exc)

    async def _wake_asked(self, nursery: trio.Nursery) -> None:
        rows = await self.platform.db.fetch_all(
            "SELECT id FROM deployment_services WHERE node = ? AND status = 'stopped' AND wake_requested_at IS NOT NULL",
            (self.platform.settings.node_name,),
        )
        for row in rows:
            service_id = str(row["id"])
            if service_id not in self.booting:
                self.booting.add(service_id)
                nursery.start_soon(self._wake, service_id)

    async def _wake(self, service_id: str) -> None:
        try:
            ref = await self.platform.system.get(DeploymentServiceActor, service_id)
            await ref.ask(StartService(), timeout=SERVICE_WAIT)
            log.info("deployment service %s started again here, as another node asked", service_id)
        except Exception as exc:  # the asking node sees it stopped, with no request left, and answers 503
            log.warning("deployment service %s was asked to start again here and did not: %s", service_id, exc)
        finally:
            with contextlib.suppress(Exception):
                await self.platform.db.execute("UPDATE deployment_services SET wake_requested_at = NULL WHERE id = ?", (service_id,))
            self.booting.discard(service_id)

    async def _boot(self, service_id: str) -> None:
        try:
            ref = await self.platform.system.get(DeploymentServiceActor, service_id)
            settled = await boot_until_settled(ref)
            log.info("deployment service %s placed here: %s", service_id, settled.status)
        except Exception as exc:
            log.warning("deployment service %s placed here did not boot: %s", service_id, exc)
        finally:
            self.booting.discard(service_id)


async def placed_services_forever(platform: DeploymentServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """`PlacedServices.round` every `ROUND_SECONDS` (on every node of a shared store);
    the boots it starts run in a nursery of their own."""
    services = PlacedServices(platform)
    async with trio.open_nursery() as nursery:
        await run_periodically(
            functools.partial(services.round, nursery), lambda: ROUND_SECONDS, "deployment services placed on this node",
            wait_first=False, task_status=task_status,
        )
