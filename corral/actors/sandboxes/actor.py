"""The sandbox actor: owns a sandbox's row and its instance's lifecycle.

States (contract §4): creating -> running | error; running -> stopped (stop) or
suspended (auto-stop); stopped/suspended -> running (start); any -> destroyed.
Creation runs in a child task so the mailbox keeps answering (`Get`, `Destroy`)
while a template builds or an instance boots.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from corral.actors.actor import handles
from corral.actors.record import RecordActor
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError, conflict
from corral.vm import (
    SIZES,
    AgentClient,
    InstanceInfo,
    InstanceNotFound,
    InstanceSpec,
    InstanceState,
    RuntimeDriver,
    RuntimeErrorBase,
)

from . import billing_hooks
from .messages import Boot, Booted, Connect, Destroy, Fork, Get, Start, Stop, Suspend
from .processes import halt_processes

log = logging.getLogger("corral.sandboxes")

NOT_RUNNING = ("SANDBOX_NOT_RUNNING", "sandbox is not running")


class SandboxActor(RecordActor):
    kind = "sandbox"
    table = "sandboxes"
    error_column = "error"
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

    info: InstanceInfo | None = None

    async def driver(self) -> RuntimeDriver:
        driver: RuntimeDriver = await self.services.runtime.driver()
        return driver

    def spec(self, instance_id: str | None = None) -> InstanceSpec:
        return InstanceSpec(
            instance_id=instance_id or self.id,
            template=self.record["template_id"],
            limits=SIZES[self.record["size"]],
            hostname=self.record["slug"],
        )

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        await super().save(state, fields)
        await billing_hooks.follow_status(self.services, self.record)  # metered while running

    async def on_failed(self, error: BaseException) -> None:
        await super().on_failed(error)
        await billing_hooks.meter_off(self.services, self.id)

    def not_found(self) -> ApiError:
        return ApiError(404, "NOT_FOUND", "sandbox not found")

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state == "destroyed":
            raise self.not_found()
        await self._reconcile()

    async def _reconcile(self) -> None:
        """Bring the record and the runtime into agreement after a (re)activation."""
        if self.state not in ("creating", "running"):
            return
        driver = await self.driver()
        try:
            info = await driver.info(self.id)
        except InstanceNotFound:
            # A sandbox still `creating` is booted by its Boot message (or by
            # `recover_interrupted` at start-up); a running one lost its instance.
            if self.state == "running":
                await self.persist(state="error", error="the instance is gone")
            return
        if info.state is not InstanceState.RUNNING:
            info = await driver.start(self.id)  # the host restarted under a running sandbox
        self.info = info
        if self.state == "creating":
            await self.persist(state="running", error=None)

    def _agent(self) -> AgentClient | None:
        """The running instance's agent, for a last word with it before it stops."""
        if self.info is None or self.info.state is not InstanceState.RUNNING:
            return None
        client: AgentClient = self.services.agents.client(self.info)
        return client

    def describe(self) -> dict[str, Any]:
        return {"address": self.info.address if self.info else None, "template": self.record["template_id"]}

    @handles(Get)
    async def get(self, message: Get) -> dict[str, Any]:
        return dict(self.record)

    @handles(Boot)
    async def boot(self, message: Boot) -> None:
        self.transition(message)
        self.spawn(self._boot)

    async def _boot(self) -> None:
        try:
            driver = await self.driver()
            info = await driver.create(self.spec())
        except Exception as exc:  # the outcome is reported, not raised: it is the sandbox's error
            log.warning("sandbox %s failed to start: %s", self.id, exc)
            summary = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
            await self.ref.tell(Booted(None, f"{type(exc).__name__}: {summary}"[:500]))
            return
        await self.ref.tell(Booted(info))

    @handles(Booted)
    async def booted(self, message: Booted) -> None:
        self.transition(message)
        if message.info is None:
            await self.persist(state="error", error=message.error)
            await self.emit("error", {"sandbox_id": self.id, "error": message.error})
            return
        self.info = message.info
        await self.persist(state="running", error=None)
        await self.emit("ready", {"sandbox_id": self.id})
        await self.emit("started", {"sandbox_id": self.id, "region": self.record["region"]})

    @handles(Start)
    async def start(self, message: Start) -> dict[str, Any]:
        next_state = self.transition(message)
        with runtime_refusals():
            self.info = await (await self.driver()).start(self.id)
        await self.persist(state=next_state)
        await self.emit("started", {"sandbox_id": self.id, "region": self.record["region"]})
        return dict(self.record)

    @handles(Stop, Suspend)
    async def stop(self, message: Stop | Suspend) -> dict[str, Any]:
        next_state = self.transition(message)
        await halt_processes(self.services, self.id, self._agent())
        with runtime_refusals():
            await (await self.driver()).stop(self.id)
        self.info = None
        await self.persist(state=next_state)
        if isinstance(message, Suspend):
            await self.emit("suspended", {"sandbox_id": self.id})
        else:
            await self.emit("stopped", {"sandbox_id": self.id, "reason": message.reason})
        return dict(self.record)

    @handles(Connect)
    async def connect(self, message: Connect) -> InstanceInfo:
        self.transition(message)
        if self.info is None or self.info.state is not InstanceState.RUNNING:
            with runtime_refusals():
                self.info = await (await self.driver()).info(self.id)
        return self.info

    @handles(Fork)
    async def fork(self, message: Fork) -> InstanceInfo:
        self.transition(message)
        driver = await self.driver()
        with runtime_refusals():
            return await driver.clone(self.id, self.spec(message.new_id))

    @handles(Destroy)
    async def destroy(self, message: Destroy) -> dict[str, Any]:
        next_state = self.transition(message)
        await halt_processes(self.services, self.id, self._agent())
        with contextlib.suppress(InstanceNotFound):
            await (await self.driver()).destroy(self.id)
        self.info = None
        await self.persist(state=next_state)
        await self.emit("destroyed", {"sandbox_id": self.id})
        return dict(self.record)


@contextlib.contextmanager
def runtime_refusals() -> Iterator[None]:
    """A runtime error in a handler answers the caller with its API code; it is not a crash."""
    try:
        yield
    except RuntimeErrorBase as exc:
        raise ApiError(exc.status, exc.code, str(exc) if exc.status < 500 else f"runtime error: {exc}") from exc


def limit_reached(limit: int) -> ApiError:
    return conflict("SANDBOX_LIMIT_REACHED", f"concurrent sandbox limit of {limit} reached")
