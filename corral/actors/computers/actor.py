"""The computer: a kind of instance actor (`corral.actors.instances`), with the spec's state table.

| state | message | next | effects |
|---|---|---|---|
| (none) | create (service) + `Boot` | provisioning | child task: create or clone the instance, install `selected_apps` |
| provisioning | `Booted` | running (or error) | `vm_id` set; metering starts; `computer.running`, `computer.started` |
| stopped | `Start` | running | 402 when credits are low; env injected at boot |
| paused | `Start` | running | 402 when credits are low; the frozen processes thaw and go on |
| running | `Stop` | stopped | files kept; `computer.stopped {reason}` |
| running | `IdleStop` | stopped | `computer.idle`, then as `Stop` with reason `idle` |
| running | `Pause` | paused | instance frozen (cgroup freezer); metering stops; `computer.stopped {reason}` (`paused`, or `credits_exhausted` from billing) |
| running | `Restart` | running | stop, then start at once |
| running | `Clone` | running | answers the instance to copy |
| stopped | `Resize` | stopped | new limits reach the cgroups on the next start |
| stopped | `Move` | stopped | to another region's node on a shared store: the files move there (`MovingInstance`) |
| running, paused, stopped | `TakeSnapshot` | (same) | a child task copies the files (see `snapshots.handlers`) |
| running, stopped | `RestoreSnapshot` | (same) | running: stopped, restored, started again |
| any | `Destroy` | (record removed) | instance destroyed; `computer.deleted` |

Everything else is a 409 with the specification's message (contract §3: `INVALID_STATE`,
or `COMPUTER_NOT_RUNNING` for exec, files and apps). Provisioning (the base's boot
child) also installs the selected apps; `Destroy` cancels it. The row goes with
`Destroy` (with its snapshots' rows and files), so a removed computer answers 404
to everything.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from corral.actors.actor import handles
from corral.actors.instances import MovingInstance, Refusals
from corral.actors.nodes.placement import Demand
from corral.actors.runtime import computer_disk_gb, disk_mb
from corral.actors.runtime_errors import public_text
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.storage import utc_now_iso
from corral.vm import SIZES, InstanceInfo, RuntimeErrorBase

from . import billing_hooks, store
from .apps import install_apps
from .desktop_session import desktop_env, wait_for_desktop
from .env import resolved_env
from .messages import (
    Boot,
    Booted,
    Clone,
    Connect,
    Destroy,
    IdleStop,
    Move,
    Pause,
    Resize,
    Restart,
    Start,
    Stop,
    Update,
)
from .snapshots import RestoreSnapshot, SnapshotHandlers, TakeSnapshot
from .store import COMPUTERS, ComputerDraft, ComputerRecord
from .templates import get_template

log = logging.getLogger("corral.computers")

NOT_RUNNING = ("COMPUTER_NOT_RUNNING", "computer is not running")


def computer_not_found() -> ApiError:
    return ApiError(404, "COMPUTER_NOT_FOUND", "computer not found")


def not_running() -> ApiError:
    return ApiError(409, *NOT_RUNNING)


class ComputerActor(SnapshotHandlers, MovingInstance):
    kind = "computer"
    store = COMPUTERS
    record: ComputerRecord
    booting_state = "provisioning"
    removed_state = "deleted"
    movable_states = ("stopped",)
    movable_when_running = ("running", "paused")
    refusals = Refusals(
        not_running=not_running(),
        instance_gone=ApiError(500, "INTERNAL_ERROR", "the computer's instance is gone"),
    )
    transitions = TransitionTable(
        {
            ("provisioning", Boot): "provisioning",
            ("provisioning", Booted): "running",
            (("stopped", "paused"), Start): "running",
            ("running", Stop): "stopped",
            ("running", IdleStop): "stopped",
            ("running", Pause): "paused",
            ("running", Restart): "running",
            ("running", Connect): "running",
            ("running", Clone): "running",
            ("stopped", Resize): "stopped",
            ("stopped", Move): "stopped",
            **{(state, TakeSnapshot): state for state in ("running", "paused", "stopped")},
            **{(state, RestoreSnapshot): state for state in ("running", "stopped")},
            ("*", Destroy): "deleted",
        },
        refusals={
            Start: ("INVALID_STATE", "computer cannot be started from its current status"),
            Stop: ("INVALID_STATE", "computer cannot be stopped from its current status"),
            IdleStop: ("INVALID_STATE", "computer cannot be stopped from its current status"),
            Pause: ("INVALID_STATE", "computer must be running to pause"),
            Restart: ("INVALID_STATE", "computer must be running to restart"),
            Clone: ("INVALID_STATE", "computer must be running to clone"),
            Resize: ("INVALID_STATE", "computer must be stopped to resize"),
            Move: ("INVALID_STATE", "computer must be stopped to move"),
            TakeSnapshot: ("INVALID_STATE", "computer must be running, paused or stopped to snapshot"),
            RestoreSnapshot: ("INVALID_STATE", "computer must be running or stopped to restore a snapshot"),
            Connect: NOT_RUNNING,
            Boot: ("INVALID_STATE", "computer is not being provisioned"),
            Booted: ("INVALID_STATE", "computer is not being provisioned"),
        },
    )

    # -- the kind's hooks ---------------------------------------------------------------

    async def create_record(self, draft: ComputerDraft) -> ComputerRecord:
        record = await self.db.transaction(lambda tx: store.create(tx, self.id, draft, self.services.settings.node_name))
        self.tenant_id = record.tenant_id
        data = {"computer_id": record.id, "name": record.name, "size": record.size, "template_type": record.template_type}
        await self.emit("created", data)
        return record

    @property
    def instance_id(self) -> str:
        return self.record.instance_id

    def not_found(self) -> ApiError:
        return computer_not_found()

    def runtime_template(self) -> str:
        template = get_template(self.record.template_type)
        return template.runtime_template if template else "default"

    def disk_gb(self) -> float:
        return computer_disk_gb(self.services.settings, self.record.size)

    def instance_env(self) -> dict[str, str]:
        template = get_template(self.record.template_type)
        return desktop_env(self.record.resolution) if template and template.desktop else {}

    async def boot_env(self) -> dict[str, str]:
        return await resolved_env(self.services, self.record)

    async def on_instance_up(self, info: InstanceInfo) -> None:
        """A desktop computer runs once its desktop answers (contract §10)."""
        template = get_template(self.record.template_type)
        if template and template.desktop:
            await wait_for_desktop(self.services.agents.client(info))

    async def after_create(self, info: InstanceInfo) -> str | None:
        """Install the selected apps; a failure is a notice, the computer runs all the same."""
        template = get_template(self.record.template_type)
        names = self.record.selected_apps
        apps = [template.catalog[name] for name in names if template and name in template.catalog]
        if not apps:
            return None
        agent = self.services.agents.client(info)
        try:
            return await install_apps(agent, apps, self.services.settings.computer_app_install_timeout)
        except RuntimeErrorBase as exc:
            return f"installing apps failed: {public_text(exc, f'computer {self.id} apps')}"

    def running_fields(self) -> dict[str, Any]:
        return {"vm_id": self.instance_id, "last_activity_at": utc_now_iso()}

    async def on_running(self, booted: bool) -> None:
        await billing_hooks.meter_started(self.services, self.record)
        await self.emit_running()

    async def on_instance_lost(self) -> None:
        await billing_hooks.meter_stopped(self.services, self.record)

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        """`deleted` is not a state the row keeps: the row (with its env and metrics) goes."""
        if state != "deleted":
            await super().save(state, fields)
            return

        await self.db.transaction(lambda tx: store.delete(tx, self.id))
        self.record = self.store.replaced(self.record, {"status": "deleted"})

    def describe(self) -> dict[str, Any]:
        return {"vm_id": self.record.vm_id, "address": self.info.address if self.info else None}

    async def emit_running(self) -> None:
        await self.emit("running", {**self.subject, "vm_id": self.instance_id})
        await self.emit("started", {**self.subject, "region": self.record.region})

    async def emit_stopped(self, reason: str) -> None:
        await self.emit("stopped", {**self.subject, "reason": reason})

    # -- the kind's state table ------------------------------------------------------------

    @handles(Start)
    async def start(self, message: Start) -> ComputerRecord:
        next_state = self.transition(message)
        await billing_hooks.require_allowance(self.services, self.record, self.record.size)
        await self.start_instance()
        await self.persist(state=next_state, error=None, last_activity_at=utc_now_iso())
        await self.on_running(booted=False)
        return self.record

    @handles(Stop, IdleStop)
    async def stop(self, message: Stop | IdleStop) -> ComputerRecord:
        next_state = self.transition(message)
        if isinstance(message, IdleStop):
            current = await self.last_activity()
            if current != message.last_activity_at:
                raise ApiError(409, "INVALID_STATE", "computer is no longer idle")
            await self.emit("idle", {**self.subject, "idle_seconds": message.idle_seconds})
        await self.halt_instance()
        await self.persist(state=next_state)
        await billing_hooks.meter_stopped(self.services, self.record)
        reason = "idle" if isinstance(message, IdleStop) else message.reason
        await self.emit_stopped(reason)
        return self.record

    def move_demand(self) -> Demand:
        return Demand("computers", self.record.size, self.runtime_template(), self.record.region)

    async def stop_for_move(self) -> bool:
        if self.state == "paused":  # its frozen memory cannot move: thawed, stopped, it arrives stopped
            with self.refused():
                await (await self.driver()).thaw(self.instance_id)
            await self.halt_instance()
            await self.persist(state="stopped")
            await self.emit_stopped("move")
            return False
        await self.stop(Stop(reason="move"))
        return True

    async def start_after_move(self) -> None:
        await self.start(Start())

    @handles(Pause)
    async def pause(self, message: Pause) -> ComputerRecord:
        next_state = self.transition(message)
        await self.pause_instance()
        await self.persist(state=next_state)
        await billing_hooks.meter_stopped(self.services, self.record)
        await self.emit_stopped(message.reason)
        return self.record

    @handles(Restart)
    async def restart(self, message: Restart) -> ComputerRecord:
        next_state = self.transition(message)
        await self.halt_instance()
        await self.emit_stopped("restart")
        await self.start_instance()
        await self.persist(state=next_state, last_activity_at=utc_now_iso())
        await self.emit_running()
        return self.record

    @handles(Clone)
    async def clone(self, message: Clone) -> str:
        self.transition(message)
        return self.instance_id

    @handles(Resize)
    async def resize(self, message: Resize) -> ComputerRecord:
        next_state = self.transition(message)
        with self.refused():
            disk = disk_mb(computer_disk_gb(self.services.settings, message.size))
            await (await self.driver()).resize(self.instance_id, replace(SIZES[message.size], disk_mb=disk))
        await self.persist(state=next_state, size=message.size)
        return self.record

    @handles(Move)
    async def move(self, message: Move) -> ComputerRecord:
        """To a region this node does not serve, on a store nodes share: the computer
        moves to a node of that region with room (its files through the blob store, as
        a drain moves it; 503 when none has room), and this actor retires. Otherwise
        the region is a label: a one-node store serves every region."""
        next_state = self.transition(message)
        if message.region != self.services.settings.node_region and self.on_shared_store():
            await self.move_to_another_node(replace(self.move_demand(), region=message.region), fields={"region": message.region})
            return self.record
        await self.persist(state=next_state, region=message.region)
        return self.record

    @handles(Destroy)
    async def destroy(self, message: Destroy) -> dict[str, Any]:
        next_state = self.transition(message)
        was_running = self.state == "running"
        await self.destroy_instance()
        await self.delete_all_snapshot_files()
        if was_running:
            await billing_hooks.meter_stopped(self.services, self.record)
        await self.persist(state=next_state)
        await self.emit("deleted", self.subject)
        return {"id": self.id, "deleted": True}

    @handles(Update)
    async def update(self, message: Update) -> ComputerRecord:
        if self.is_removed():
            raise computer_not_found()
        await self.persist(**message.fields)
        return self.record
