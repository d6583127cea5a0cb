"""The sandbox: a kind of instance actor (`corral.actors.instances`).

States (contract §4): creating -> running | error; running -> stopped (stop) or
suspended (auto-stop); stopped/suspended -> running (start); any -> destroyed.
What differs from the other kinds: processes get a last word before the instance
stops, metering follows the status, and a fork is copied by the source's actor.
"""

from __future__ import annotations

from typing import Any

from corral.actors.actor import handles
from corral.actors.instances import MovingInstance
from corral.actors.nodes.placement import Demand
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.vm import AgentClient, InstanceInfo, InstanceSpec, RuntimeDriver

from . import billing_hooks, store
from .messages import Boot, Booted, Connect, Destroy, Fork, Start, Stop, Suspend
from .process_actor import halt_processes
from .store import SANDBOXES, SandboxDraft, SandboxRecord
from .warm_pool import sandbox_spec

NOT_RUNNING = ("SANDBOX_NOT_RUNNING", "sandbox is not running")


class SandboxActor(MovingInstance):
    kind = "sandbox"
    store = SANDBOXES
    record: SandboxRecord
    booting_state = "creating"
    created_now = False
    adopt_while_booting = True
    gone_states = ("destroyed",)
    movable_states = ("stopped", "suspended")
    movable_when_running = ("running",)
    transitions = TransitionTable(
        {
            ("creating", Boot): "creating",
            ("creating", Booted): "running",
            (("stopped", "suspended"), Start): "running",
            ("running", Stop): "stopped",
            ("running", Suspend): "suspended",
            ("running", Connect): "running",
            (("running", "stopped", "suspended"), Fork): "*",
            ("*", Destroy): "destroyed",
        },
        refusals={
            Start: ("INVALID_STATE", "sandbox cannot be started from its current status"),
            Stop: NOT_RUNNING,
            Suspend: NOT_RUNNING,
            Connect: NOT_RUNNING,
            Fork: ("INVALID_STATE", "sandbox cannot be forked from its current status"),
            Boot: ("INVALID_STATE", "sandbox is not being created"),
            Booted: ("INVALID_STATE", "sandbox is not being created"),
        },
    )

    # -- the kind's hooks ---------------------------------------------------------------

    def not_found(self) -> ApiError:
        return ApiError(404, "NOT_FOUND", "sandbox not found")

    async def create_record(self, draft: SandboxDraft) -> SandboxRecord:
        record = await self.db.transaction(lambda tx: store.create(tx, self.id, draft, self.services.settings.node_name))
        self.tenant_id = record.tenant_id
        self.created_now = True
        await self.emit("created", self.subject)
        return record

    async def reconcile(self) -> None:
        # A sandbox made just now may already have its instance (one from the warm
        # pool, of its id): its `Boot` adopts it, with the events of a boot.
        if not self.created_now:
            await super().reconcile()

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state == "destroyed":
            raise self.not_found()

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        await super().save(state, fields)
        await billing_hooks.follow_status(self.services, self.record)  # metered while running

    async def on_failed(self, error: BaseException) -> None:
        await super().on_failed(error)
        await billing_hooks.meter_off(self.services, self.id)

    async def on_running(self, booted: bool) -> None:
        if booted:
            await self.emit("ready", self.subject)
        await self.emit("started", {**self.subject, "region": self.record.region})

    async def before_halt(self) -> None:
        info = self.running_agent_info()
        agent: AgentClient | None = self.services.agents.client(info) if info is not None else None
        await halt_processes(self.services, self.id, agent)

    async def on_instance_lost(self) -> None:
        """Its processes died with the instance (its node was lost, or the runtime no
        longer has it): their records say `killed`, without last lines (no agent)."""
        await halt_processes(self.services, self.id, None)

    def spec(self, boot_env: dict[str, str], instance_id: str | None = None) -> InstanceSpec:
        """As a pooled instance is made (`warm_pool.sandbox_spec`): the size's limits,
        hostname from the id."""
        return sandbox_spec(self.services.settings, instance_id or self.instance_id, self.runtime_template(), self.record.size, boot_env)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "template": self.record.template_id}

    async def template_here(self, driver: RuntimeDriver) -> None:
        """A tenant's template built on another node: its layer fetched first."""
        templates = self.services.sandbox_templates
        if templates is not None:
            with self.refused():
                await templates.here(self.services, driver, self.runtime_template())

    # -- the kind's state table ------------------------------------------------------------

    @handles(Start)
    async def start(self, message: Start) -> SandboxRecord:
        next_state = self.transition(message)
        await self.start_instance()
        await self.persist(state=next_state)
        await self.on_running(booted=False)
        return self.record

    @handles(Stop, Suspend)
    async def stop(self, message: Stop | Suspend) -> SandboxRecord:
        next_state = self.transition(message)
        if isinstance(message, Suspend) and message.last_activity_at is not None:
            current = await self.last_activity()
            if current != message.last_activity_at:
                raise ApiError(409, "INVALID_STATE", "sandbox is no longer idle")
            await self.emit("idle", {**self.subject, "last_activity_at": message.last_activity_at})
        await self.halt_instance()
        await self.persist(state=next_state)
        if isinstance(message, Suspend):
            await self.emit("suspended", self.subject)
        else:
            await self.emit("stopped", {**self.subject, "reason": message.reason})
        return self.record

    def move_demand(self) -> Demand:
        return Demand("sandboxes", self.record.size, self.record.template_id, self.record.region)

    async def stop_for_move(self) -> bool:
        await self.stop(Stop(reason="move"))
        return True

    async def start_after_move(self) -> None:
        await self.start(Start())

    @handles(Fork)
    async def fork(self, message: Fork) -> InstanceInfo:
        self.transition(message)
        driver = await self.driver()
        with self.refused():
            return await driver.clone(self.id, self.spec({}, instance_id=message.new_id))

    @handles(Destroy)
    async def destroy(self, message: Destroy) -> SandboxRecord:
        next_state = self.transition(message)
        await self.destroy_instance()
        await self.persist(state=next_state)
        await self.emit("destroyed", self.subject)
        return self.record
