"""The process actor: one background process of a sandbox, a supervised child of it.

The process itself runs inside the instance, under the guest agent, which keeps its
logs (bounded) and notices its exit. This actor owns the durable record: it
long-polls the agent for new lines (publishing them as `sandbox.process.stdout` /
`.stderr` events and counting them as sandbox activity) and for the exit, and
records `exited` or `killed` with the exit code and a final tail of the logs, so
the record and its last lines outlive the instance. After a control-plane restart
the actor is activated again and picks the watch up where the agent is.

States (specification, "Sandbox process status"): running -> exited | killed;
`error` is written at creation when the spawn fails.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.messages import Message
from corral.actors.record import RecordActor
from corral.actors.runtime_errors import answer_for, public_text
from corral.actors.sandboxes.services import SandboxServices
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.storage import Event, utc_now_iso
from corral.vm import AgentClient, RuntimeErrorBase

from . import process_store
from .activity import touch
from .process_store import PROCESSES, ProcessRecord

log = logging.getLogger("corral.sandboxes.processes")

KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL when a process is deleted."""
FINAL_LOG_LINES = 1000
"""Lines of a finished process kept in its record once the agent's copy is gone."""
LONG_POLL = 25.0
LINE_EVENTS_PER_SECOND = 1000
"""Log lines a process may publish as events per second; logs keep every line."""
ACTIVITY_EVERY = 1.0


@dataclass(frozen=True)
class GetProcess(Message):
    """Ask for the process record."""


@dataclass(frozen=True)
class Kill(Message):
    """Stop the process: SIGTERM to its group, SIGKILL after `grace` seconds."""

    grace: float = KILL_GRACE


@dataclass(frozen=True)
class Finished(Message):
    """The process ended (told by the watcher): its final status, exit code and logs."""

    status: str
    exit_code: int | None
    exited_at: str | None
    logs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Halted(Message):
    """The sandbox stopped under the process (told by the sandbox actor before it stops)."""

    logs: list[dict[str, Any]] = field(default_factory=list)


class ProcessActor(RecordActor):
    kind = "process"
    store = PROCESSES
    record: ProcessRecord
    error_column = "error"
    transitions = TransitionTable(
        {
            ("running", Kill): "killed",
            ("running", Finished): "*",
            ("running", Halted): "killed",
            ("*", GetProcess): "*",
        },
        refusals={Kill: ("PROCESS_NOT_RUNNING", "process is not running")},
    )

    def not_found(self) -> ApiError:
        return ApiError(404, "NOT_FOUND", "process not found")

    async def create_record(self, draft: ProcessRecord) -> ProcessRecord:
        """A new process (`running`, or `error` when its spawn failed)."""
        await self.db.transaction(lambda tx: self.store.insert(tx, draft))
        return draft

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state == "running":
            self.spawn(self._watch)

    def describe(self) -> dict[str, Any]:
        return {"sandbox_id": self.record.sandbox_id, "cmd": self.record.cmd}

    @handles(GetProcess)
    async def get(self, message: GetProcess) -> ProcessRecord:
        return self.record

    @handles(Kill)
    async def kill(self, message: Kill) -> ProcessRecord:
        self.transition(message)
        agent = await self._agent()
        try:
            final = await agent.kill(self.id, grace=message.grace)
            logs = (await agent.logs(self.id, tail=FINAL_LOG_LINES))["lines"]
        except RuntimeErrorBase as exc:
            status, code = answer_for(exc)
            raise ApiError(status, code, public_text(exc, f"process {self.id}")) from exc
        # The agent answers once the process is gone; whatever way it ended, it was killed.
        await self._finish("killed", final.get("exit_code"), final.get("exited_at"), logs)
        return self.record

    @handles(Finished)
    async def finished(self, message: Finished) -> ProcessRecord:
        self.transition(message)
        await self._finish(message.status, message.exit_code, message.exited_at, message.logs)
        return self.record

    @handles(Halted)
    async def halted(self, message: Halted) -> ProcessRecord:
        self.transition(message)
        await self._finish("killed", None, None, message.logs)
        return self.record

    async def _finish(self, status: str, exit_code: int | None, exited_at: str | None, logs: list[dict[str, Any]]) -> None:
        await self.persist(
            state=status,
            exit_code=exit_code,
            exited_at=exited_at or utc_now_iso(),
            final_logs=json.dumps(logs[-FINAL_LOG_LINES:], separators=(",", ":")),
        )
        await self.bus.publish(
            Event(
                f"sandbox.process.{status}",
                "sandbox",
                self.record.sandbox_id,
                {"pid": self.id, "status": status, "exit_code": exit_code},
                tenant_id=self.tenant_id,
            )
        )

    async def _agent(self) -> AgentClient:
        """The sandbox's agent, straight from the runtime: the sandbox's own actor may be
        the one waiting on this actor (a halt), so it is not asked."""
        driver = await self.services.runtime.driver()
        info = await driver.info(self.record.sandbox_id)
        client: AgentClient = self.services.agents.client(info)
        return client

    async def _watch(self) -> None:
        """Follow the process in the agent until it ends; report the end with `Finished`."""
        platform = self.services
        sandbox_id = self.record.sandbox_id
        after = int(self.record.log_seq or 0)
        budget = _LineBudget(LINE_EVENTS_PER_SECOND)
        last_activity = 0.0
        while self.state == "running":
            try:
                agent = await self._agent()
                batch = await agent.logs_after(self.id, after, wait=LONG_POLL)
            except (ApiError, RuntimeErrorBase) as exc:
                if (exc.status if isinstance(exc, ApiError) else answer_for(exc)[0]) == 404:
                    # The agent no longer knows the process (its instance restarted).
                    await self.ref.tell(Finished("killed", None, None))
                    return
                log.debug("process %s: agent unavailable (%s); retrying", self.id, exc)
                await trio.sleep(1.0)
                continue
            lines = batch["lines"]
            for line in lines:
                if budget.take():
                    await self.bus.publish(
                        Event(
                            f"sandbox.process.{line['stream']}",
                            "sandbox",
                            sandbox_id,
                            {"pid": self.id, "line": line["line"], "ts": line["ts"]},
                            tenant_id=self.tenant_id,
                        )
                    )
            if int(batch["next"]) != after:
                after = int(batch["next"])
                # Remembered so that a control plane restarted mid-way publishes no line twice.
                await self.store.update(self.db, self.id, {"log_seq": after})
            if lines and time.monotonic() - last_activity > ACTIVITY_EVERY:
                last_activity = time.monotonic()
                await touch(platform, sandbox_id)
            process = batch["process"]
            if process["status"] != "running" and len(lines) == 0:
                try:
                    tail = (await agent.logs(self.id, tail=FINAL_LOG_LINES))["lines"]
                except RuntimeErrorBase:
                    tail = []
                await self.ref.tell(Finished(process["status"], process.get("exit_code"), process.get("exited_at"), tail))
                return


class _LineBudget:
    """At most `rate` line events per second, so a chatty process cannot flood the event log."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.window = 0
        self.used = 0

    def take(self) -> bool:
        window = int(time.monotonic())
        if window != self.window:
            self.window, self.used = window, 0
        self.used += 1
        return self.used <= self.rate


async def halt_processes(platform: SandboxServices, sandbox_id: str, agent: AgentClient | None) -> None:
    """Before a sandbox stops: keep each running process's last lines in its record and
    mark it killed (the instance's processes die with it)."""
    for process_id in await process_store.running_ids(platform.db, sandbox_id):
        logs: list[dict[str, Any]] = []
        if agent is not None:
            with contextlib.suppress(RuntimeErrorBase):
                logs = (await agent.logs(process_id, tail=FINAL_LOG_LINES))["lines"]
        ref = await platform.system.get(ProcessActor, process_id)
        with contextlib.suppress(ApiError):
            # Short: the process actor may itself be waiting on this sandbox (a kill).
            await ref.ask(Halted(logs), timeout=5)


async def resume_watchers(platform: SandboxServices) -> int:
    """At start-up: activate the actor of every running process of the sandboxes this node
    hosts, so its watch goes on (another node's are watched there)."""
    running = await process_store.running_ids_hosted_by(platform.db, platform.settings.node_name)
    for process_id in running:
        with contextlib.suppress(ApiError):
            await platform.system.get(ProcessActor, process_id)
    return len(running)
