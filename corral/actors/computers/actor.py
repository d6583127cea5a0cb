"""The computer actor: owns a computer's row and its instance, with the spec's state table.

| state | message | next | effects |
|---|---|---|---|
| (none) | create (service) + `Boot` | provisioning | child task: create or clone the instance, install `selected_apps` |
| provisioning | `Booted` | running (or error) | `vm_id` set; metering starts; `computer.running`, `computer.started` |
| stopped, paused | `Start` | running | 402 when credits are low; env injected at boot |
| running | `Stop` | stopped | files kept; `computer.stopped {reason}` |
| running | `IdleStop` | stopped | `computer.idle`, then as `Stop` with reason `idle` |
| running | `Pause` | paused | credits exhausted: as `Stop`, reason `credits_exhausted` |
| running | `Restart` | running | stop, then start at once |
| running | `Clone` | running | answers the instance to copy |
| stopped | `Resize`, `Move` | stopped | new limits reach the cgroups on the next start |
| any | `Destroy` | (record removed) | instance destroyed; `computer.deleted` |

Everything else is a 409 with the specification's message (contract §3: `INVALID_STATE`,
or `COMPUTER_NOT_RUNNING` for exec, files and apps). Provisioning runs in a child
task so the mailbox keeps answering `Get` and `Destroy` while an instance boots and
apt installs apps; `Destroy` cancels it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.record import RecordActor
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.storage import Transaction, utc_now_iso
from corral.vm import (
    SIZES,
    InstanceInfo,
    InstanceNotFound,
    InstanceSpec,
    InstanceState,
    RuntimeDriver,
    RuntimeErrorBase,
)

from . import credits
from .apps import install_apps
from .env import resolved_env
from .messages import (
    Boot,
    Booted,
    Clone,
    Connect,
    Destroy,
    Get,
    IdleStop,
    Move,
    Pause,
    Resize,
    Restart,
    Start,
    Stop,
    Update,
)
from .templates import get_template

log = logging.getLogger("corral.computers")

NOT_RUNNING = ("COMPUTER_NOT_RUNNING", "computer is not running")


def computer_not_found() -> ApiError:
    return ApiError(404, "COMPUTER_NOT_FOUND", "computer not found")


def not_running() -> ApiError:
    return ApiError(409, *NOT_RUNNING)


class ComputerActor(RecordActor):
    kind = "computer"
    table = "computers"
    error_column = "error"
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
            ("*", Destroy): "deleted",
        },
        refusals={
            Start: ("INVALID_STATE", "computer cannot be started from its current status"),
            Stop: ("INVALID_STATE", "computer cannot be stopped from its current status"),
            IdleStop: ("INVALID_STATE", "computer cannot be stopped from its current status"),
            Pause: ("INVALID_STATE", "computer cannot be paused from its current status"),
            Restart: ("INVALID_STATE", "computer must be running to restart"),
            Clone: ("INVALID_STATE", "computer must be running to clone"),
            Resize: ("INVALID_STATE", "computer must be stopped to resize"),
            Move: ("INVALID_STATE", "computer must be stopped to move"),
            Connect: NOT_RUNNING,
            Boot: ("INVALID_STATE", "computer is not being provisioned"),
            Booted: ("INVALID_STATE", "computer is not being provisioned"),
        },
    )

    info: InstanceInfo | None = None
    _provisioning: trio.CancelScope | None = None

    # -- plumbing ---------------------------------------------------------------------

    @property
    def instance_id(self) -> str:
        return str(self.record["instance_id"])

    async def driver(self) -> RuntimeDriver:
        driver: RuntimeDriver = await self.services.runtime.driver()
        return driver

    def not_found(self) -> ApiError:
        return computer_not_found()

    def transition(self, message: Any) -> str:
        if self.state == "deleted":  # removed while a request was on its way
            raise computer_not_found()
        return super().transition(message)

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        """`deleted` is not a state the row keeps: the row (with its env and metrics) goes."""
        if state != "deleted":
            await super().save(state, fields)
            return

        def work(tx: Transaction) -> None:
            for table in ("computer_env", "computer_metrics"):
                tx.execute(f"DELETE FROM {table} WHERE computer_id = ?", (self.id,))
            tx.execute("DELETE FROM computers WHERE id = ?", (self.id,))

        await self.db.transaction(work)
        self.record = {**self.record, "status": "deleted"}

    async def boot_env(self) -> dict[str, str]:
        return await resolved_env(self.services, self.record)

    def spec(self, boot_env: dict[str, str]) -> InstanceSpec:
        template = get_template(self.record["template_type"])
        return InstanceSpec(
            instance_id=self.instance_id,
            template=template.runtime_template if template else "default",
            limits=SIZES[self.record["size"]],
            hostname=self.record["slug"],
            boot_env=boot_env,
        )

    def describe(self) -> dict[str, Any]:
        return {"vm_id": self.record.get("vm_id"), "address": self.info.address if self.info else None}

    async def emit_running(self) -> None:
        await self.emit("running", {"computer_id": self.id, "vm_id": self.instance_id})
        await self.emit("started", {"computer_id": self.id, "region": self.record["region"]})

    async def emit_stopped(self, reason: str) -> None:
        await self.emit("stopped", {"computer_id": self.id, "reason": reason})

    # -- activation -------------------------------------------------------------------

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state == "running":
            await self._reconcile()

    async def _reconcile(self) -> None:
        """A running computer whose instance stopped under it (host restart) is started again."""
        driver = await self.driver()
        try:
            info = await driver.info(self.instance_id)
        except InstanceNotFound:
            await self.persist(state="error", error="the instance is gone")
            await credits.meter_stopped(self.services, self.record)
            return
        if info.state is not InstanceState.RUNNING:
            info = await driver.start(self.instance_id, await self.boot_env())
        self.info = info

    # -- provisioning -----------------------------------------------------------------

    @handles(Boot)
    async def boot(self, message: Boot) -> None:
        self.transition(message)
        self.spawn(self._provision, message.clone_source)

    async def _provision(self, clone_source: str | None) -> None:
        with trio.CancelScope() as scope:
            self._provisioning = scope
            try:
                outcome = await self._make_instance(clone_source)
            except Exception as exc:  # the outcome is reported, not raised: it is the computer's error
                log.warning("computer %s failed to provision: %s", self.id, exc)
                summary = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
                outcome = Booted(None, f"{type(exc).__name__}: {summary}"[:500])
            finally:
                self._provisioning = None
            with contextlib.suppress(ApiError):  # the computer was deleted meanwhile
                await self.ref.tell(outcome)

    async def _make_instance(self, clone_source: str | None) -> Booted:
        driver = await self.driver()
        env = await self.boot_env()
        try:  # created before a control-plane restart cut provisioning short
            info = await driver.info(self.instance_id)
            if info.state is not InstanceState.RUNNING:
                info = await driver.start(self.instance_id, env)
        except InstanceNotFound:
            if clone_source is not None:
                info = await driver.clone(clone_source, self.spec(env))
            else:
                info = await driver.create(self.spec(env))
        apps_error = None
        if clone_source is None:
            apps_error = await self._install_selected_apps(info)
        return Booted(info, apps_error=apps_error)

    async def _install_selected_apps(self, info: InstanceInfo) -> str | None:
        template = get_template(self.record["template_type"])
        names = json.loads(self.record["selected_apps"])
        apps = [template.catalog[name] for name in names if template and name in template.catalog]
        if not apps:
            return None
        agent = self.services.agents.client(info)
        try:
            return await install_apps(agent, apps, self.services.settings.computer_app_install_timeout)
        except RuntimeErrorBase as exc:
            return f"installing apps failed: {exc}"

    @handles(Booted)
    async def booted(self, message: Booted) -> None:
        self.transition(message)
        if message.info is None:
            await self.persist(state="error", error=message.error)
            await self.emit("error", {"computer_id": self.id, "error": message.error})
            return
        self.info = message.info
        await self.persist(state="running", vm_id=self.instance_id, error=message.apps_error, last_activity_at=utc_now_iso())
        await credits.meter_started(self.services, self.record)
        await self.emit_running()

    # -- lifecycle --------------------------------------------------------------------

    @handles(Start)
    async def start(self, message: Start) -> dict[str, Any]:
        next_state = self.transition(message)
        await credits.require_allowance(self.services, self.record, self.record["size"])
        with runtime_refusals():
            self.info = await (await self.driver()).start(self.instance_id, await self.boot_env())
        await self.persist(state=next_state, error=None, last_activity_at=utc_now_iso())
        await credits.meter_started(self.services, self.record)
        await self.emit_running()
        return dict(self.record)

    @handles(Stop, IdleStop, Pause)
    async def stop(self, message: Stop | IdleStop | Pause) -> dict[str, Any]:
        next_state = self.transition(message)
        if isinstance(message, IdleStop):
            current = await self.db.fetch_value("SELECT last_activity_at FROM computers WHERE id = ?", (self.id,))
            if current != message.last_activity_at:
                raise ApiError(409, "INVALID_STATE", "computer is no longer idle")
            await self.emit("idle", {"computer_id": self.id, "idle_seconds": message.idle_seconds})
        await self._halt()
        await self.persist(state=next_state)
        await credits.meter_stopped(self.services, self.record)
        reason = "idle" if isinstance(message, IdleStop) else message.reason
        await self.emit_stopped(reason)
        return dict(self.record)

    async def _halt(self) -> None:
        with runtime_refusals():
            await (await self.driver()).stop(self.instance_id)
        self.info = None
        await self.services.agents.forget(self.instance_id)

    @handles(Restart)
    async def restart(self, message: Restart) -> dict[str, Any]:
        next_state = self.transition(message)
        await self._halt()
        await self.emit_stopped("restart")
        with runtime_refusals():
            self.info = await (await self.driver()).start(self.instance_id, await self.boot_env())
        await self.persist(state=next_state, last_activity_at=utc_now_iso())
        await self.emit_running()
        return dict(self.record)

    @handles(Clone)
    async def clone(self, message: Clone) -> str:
        self.transition(message)
        return self.instance_id

    @handles(Resize)
    async def resize(self, message: Resize) -> dict[str, Any]:
        next_state = self.transition(message)
        with runtime_refusals():
            await (await self.driver()).resize(self.instance_id, SIZES[message.size])
        await self.persist(state=next_state, size=message.size)
        return dict(self.record)

    @handles(Move)
    async def move(self, message: Move) -> dict[str, Any]:
        next_state = self.transition(message)
        await self.persist(state=next_state, region=message.region)
        return dict(self.record)

    @handles(Destroy)
    async def destroy(self, message: Destroy) -> dict[str, Any]:
        next_state = self.transition(message)
        was_running = self.state == "running"
        if self._provisioning is not None:
            self._provisioning.cancel()
        with runtime_refusals(), contextlib.suppress(InstanceNotFound):
            await (await self.driver()).destroy(self.instance_id)
        self.info = None
        await self.services.agents.forget(self.instance_id)
        if was_running:
            await credits.meter_stopped(self.services, self.record)
        await self.persist(state=next_state)
        await self.emit("deleted", {"computer_id": self.id})
        return {"id": self.id, "deleted": True}

    # -- access -----------------------------------------------------------------------

    @handles(Connect)
    async def connect(self, message: Connect) -> InstanceInfo:
        self.transition(message)
        if self.info is None or self.info.state is not InstanceState.RUNNING:
            with runtime_refusals():
                self.info = await (await self.driver()).info(self.instance_id)
            if self.info.state is not InstanceState.RUNNING:
                raise not_running()
        return self.info

    @handles(Update)
    async def update(self, message: Update) -> dict[str, Any]:
        if self.state == "deleted":
            raise computer_not_found()
        await self.persist(**message.fields)
        return dict(self.record)

    @handles(Get)
    async def get(self, message: Get) -> dict[str, Any]:
        if self.state == "deleted":
            raise computer_not_found()
        return dict(self.record)


@contextlib.contextmanager
def runtime_refusals() -> Iterator[None]:
    """A runtime error in a handler answers the caller with its API code, not a crash;
    the runtime's sandbox-worded 409s become the computer's own."""
    try:
        yield
    except InstanceNotFound as exc:
        raise ApiError(500, "INTERNAL_ERROR", "the computer's instance is gone") from exc
    except RuntimeErrorBase as exc:
        if exc.code in ("SANDBOX_NOT_RUNNING", "SANDBOX_RUNTIME_UNAVAILABLE"):
            raise not_running() from exc
        raise ApiError(exc.status, exc.code, str(exc) if exc.status < 500 else f"runtime error: {exc}") from exc
