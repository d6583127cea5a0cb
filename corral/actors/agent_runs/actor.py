"""The run actor: one agent run, its record, its durable events and its artifacts.

States (specification, "Agent run status"): running -> succeeded | failed | canceled.
The actor launches the command as a process in the target (`Launch`), then a child
task follows that process in the target's agent (a long-poll that answers when it
exits), reads the kept output, captures the declared artifacts and reports the end
(`Exited`); the handler writes the final state. `Cancel` and the run's `timeout`
stop the process (SIGTERM, then SIGKILL) in a child task, so the mailbox keeps
flowing.

Every event is written to `agent_run_events` in the same transaction as the record
change it announces, then published on the bus (same id) for live streams. After a
control-plane restart the actor of every running run is activated again and follows
its process where the agent is; a process the agent no longer knows (its instance
restarted) fails the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.messages import Message
from corral.actors.record import RecordActor
from corral.actors.runtime_errors import answer_for, public_text
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.ids import new_ulid
from corral.storage import Event, Transaction, utc_now_iso
from corral.vm import AgentClient, RuntimeErrorBase

from . import store, targets
from .artifacts import artifact_paths, capture
from .commands import NOT_INSTALLED, OUTPUT_CAP, TIMED_OUT, check_installed
from .store import RUNS, AgentRunRecord, ArtifactRecord, RunEvent
from .targets import Target

log = logging.getLogger("corral.agent_runs")

LONG_POLL = 25.0
OUTPUT_READ_LIMIT = 2.0
"""How long a cancel waits for the output printed so far before answering without it."""
AGENT_RETRY = 1.0
OUTPUT_ATTEMPTS = 3
FOREVER = 1 << 62
"""A log sequence no process reaches: the long-poll then answers only at the exit."""


@dataclass(frozen=True)
class GetRun(Message):
    """Ask for the record."""


@dataclass(frozen=True)
class Launch(Message):
    """Start the command in the target with `env` (told once, right after creation)."""

    env: dict[str, str] = field(hash=False)
    cli: str | None = None
    """A provider CLI that must be installed in the target (127 when it is not)."""


@dataclass(frozen=True)
class Exited(Message):
    """The process ended (from the follower): what it left."""

    exit_code: int | None
    output: str
    stderr: str
    output_truncated: bool
    stderr_truncated: bool
    artifacts: list[ArtifactRecord] = field(default_factory=list, hash=False)
    killed: bool = False


@dataclass(frozen=True)
class Lost(Message):
    """The process cannot be followed any more (target stopped, instance restarted)."""

    reason: str


@dataclass(frozen=True)
class TimedOut(Message):
    """The run's `timeout` passed with the process still running."""


@dataclass(frozen=True)
class Cancel(Message):
    """Stop the process and mark the run canceled."""


class AgentRunActor(RecordActor):
    kind = "agent_run"
    store = RUNS
    record: AgentRunRecord
    error_state = "failed"
    error_column = "error"
    idle_timeout = 60.0
    transitions = TransitionTable(
        {
            ("running", Launch): "running",
            ("running", Exited): "*",
            ("running", Lost): "failed",
            ("running", TimedOut): "failed",
            ("running", Cancel): "canceled",
            ("*", GetRun): "*",
        },
        refusals={Cancel: ("INVALID_STATE", "agent run is already finished")},
    )

    async def create_record(self, draft: AgentRunRecord) -> AgentRunRecord:
        """The new run (`running`) and its `created` event, in one transaction."""
        event = self._event("created", {"status": "running", "target_kind": draft.target_kind, "target_id": draft.target_id, "provider": draft.provider}, draft)

        def write(tx: Transaction) -> None:
            store.insert_run(tx, draft)
            store.insert_event(tx, event)

        await self.db.transaction(write)
        await self._publish(event, draft)
        return draft

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state != "running" or self.draft is not None:
            return
        if self.record.metadata.get("agent_process"):
            self.spawn(self._follow)  # re-adopted after a control-plane restart
        else:
            self.spawn(self._report, Lost("the control plane restarted before the command started"))

    def describe(self) -> dict[str, Any]:
        return {"target_kind": self.record.target_kind, "target_id": self.record.target_id}

    # -- handlers ----------------------------------------------------------------------

    @handles(GetRun)
    async def get(self, message: GetRun) -> AgentRunRecord:
        return self.record

    @handles(Launch)
    async def launch(self, message: Launch) -> AgentRunRecord:
        if self.state != "running":
            return self.record  # canceled before it could start: nothing to launch
        run = self.record
        target = Target(run.target_kind, run.target_id, run.tenant_id, run.workspace_id)
        try:
            agent = await targets.agent_of(self.services, run.target_kind, run.tenant_id, run.target_id)
            if message.cli is not None and (await agent.exec(check_installed(message.cli), timeout=10)).exit_code != 0:
                await self._fail(NOT_INSTALLED, f"the {message.cli} CLI is not installed in the target", stderr=f"{message.cli}: command not found\n")
                return self.record
            command_started = self._event("command_started", {"command": run.command, "cwd": run.cwd})
            spawned = await targets.spawn(
                self.services, target, agent, run.command, run.cwd, message.env, f"agent-run-{run.id[:8]}",
                stdin=run.prompt, capture=OUTPUT_CAP,
            )
        except (ApiError, RuntimeErrorBase) as exc:
            await self._fail(None, f"the command could not be started: {public_text(exc, f'agent run {self.id}')}")
            return self.record
        process = {
            "target_kind": run.target_kind,
            "target_id": run.target_id,
            "process_id": spawned.process_id,
            "pid": spawned.process_id,
            "started_at": spawned.started_at or utc_now_iso(),
        }
        metadata = {**run.metadata, "agent_process": process}
        await self._record_event("process_started", process, before=command_started, metadata=metadata)
        self.spawn(self._follow)
        return self.record

    @handles(Exited)
    async def exited(self, message: Exited) -> AgentRunRecord:
        if self.state != "running":
            # Canceled or timed out meanwhile: that was the end, but what the process
            # printed until it was stopped is still worth keeping.
            await self._keep_output(message)
            return self.record
        status = "succeeded" if message.exit_code == 0 and not message.killed else "failed"
        changes: dict[str, Any] = {
            "output": message.output,
            "stderr": message.stderr,
            "output_truncated": int(message.output_truncated),
            "stderr_truncated": int(message.stderr_truncated),
        }
        if message.artifacts:
            await self._record_artifacts(message.artifacts)
        await self._finish(status, message.exit_code, "command_finished", {"status": status}, **changes)
        return self.record

    async def _keep_output(self, message: Exited) -> None:
        values: dict[str, Any] = {
            "output": message.output,
            "stderr": message.stderr,
            "output_truncated": int(message.output_truncated),
            "stderr_truncated": int(message.stderr_truncated),
            "updated_at": utc_now_iso(),
        }
        await self.db.transaction(lambda tx: store.update_run(tx, self.id, values))
        self.record = dataclasses.replace(self.record, **values)

    @handles(Lost)
    async def lost(self, message: Lost) -> AgentRunRecord:
        if self.state != "running":
            return self.record
        await self._fail(None, message.reason)
        return self.record

    @handles(TimedOut)
    async def timed_out(self, message: TimedOut) -> AgentRunRecord:
        if self.state != "running":
            return self.record
        await self._fail(TIMED_OUT, f"the run exceeded its timeout of {self.record.timeout_seconds} s")
        self._stop_process()
        return self.record

    @handles(Cancel)
    async def cancel(self, message: Cancel) -> AgentRunRecord:
        self.transition(message)
        printed = await self._output_so_far()
        await self._finish("canceled", None, "canceled", {"status": "canceled"}, **printed)
        self._stop_process()
        return self.record

    async def _output_so_far(self) -> dict[str, Any]:
        """What the process printed until now, so the canceled record shows it at once
        (the follower replaces it with the full output once the process is gone)."""
        process = self._process()
        if process is None:
            return {}
        run = self.record
        with trio.move_on_after(OUTPUT_READ_LIMIT), contextlib.suppress(ApiError, RuntimeErrorBase):
            agent = await targets.agent_of(self.services, run.target_kind, run.tenant_id, run.target_id)
            kept = await agent.output(str(process["process_id"]))
            return {
                "output": kept.stdout[:OUTPUT_CAP].decode("utf-8", errors="replace"),
                "stderr": kept.stderr[:OUTPUT_CAP].decode("utf-8", errors="replace"),
                "output_truncated": int(kept.stdout_bytes > OUTPUT_CAP),
                "stderr_truncated": int(kept.stderr_bytes > OUTPUT_CAP),
            }
        return {}

    # -- the process ------------------------------------------------------------------------

    def _process(self) -> dict[str, Any] | None:
        process = self.record.metadata.get("agent_process")
        return process if isinstance(process, dict) else None

    def _stop_process(self) -> None:
        process = self._process()
        if process is not None:
            run = self.record
            self.spawn(targets.stop, self.services, run.target_kind, run.tenant_id, run.target_id, str(process["process_id"]))

    async def _report(self, message: Message) -> None:
        await self.ref.tell(message)

    def _deadline(self) -> float:
        """The trio clock time at which the run times out (from its start, across restarts)."""
        started = datetime.fromisoformat(self.record.started_at.replace("Z", "+00:00")).timestamp()
        return trio.current_time() + (started + self.record.timeout_seconds - time.time())

    async def _follow(self) -> None:
        """Wait for the process to end in the target's agent, then report what it left."""
        run = self.record
        process = self._process()
        assert process is not None
        process_id = str(process["process_id"])
        deadline = self._deadline()
        with targets.busy(self.services, run.target_kind, run.target_id):
            while True:
                left = deadline - trio.current_time()
                if left <= 0:
                    await self.ref.tell(TimedOut())  # which stops the process; its end is still followed
                    deadline, left = math.inf, LONG_POLL
                try:
                    agent = await targets.agent_of(self.services, run.target_kind, run.tenant_id, run.target_id)
                    batch = await agent.logs_after(process_id, FOREVER, wait=min(LONG_POLL, left))
                except ApiError as exc:
                    await self.ref.tell(Lost(f"the target is no longer running ({exc.message})"))
                    return
                except RuntimeErrorBase as exc:
                    if answer_for(exc)[0] == 404:
                        await self.ref.tell(Lost("the process is gone: its instance restarted"))
                        return
                    log.debug("agent run %s: agent unavailable (%s); retrying", run.id, exc)
                    await trio.sleep(AGENT_RETRY)
                    continue
                final = batch["process"]
                if final["status"] != "running":
                    await self.ref.tell(await self._collect(agent, final, process_id))
                    return

    async def _collect(self, agent: AgentClient, final: dict[str, Any], process_id: str) -> Exited:
        run = self.record
        out, err, out_total, err_total = b"", b"", 0, 0
        for attempt in range(OUTPUT_ATTEMPTS):  # a busy agent may miss one call: the output is the run's result
            try:
                kept = await agent.output(process_id)
            except RuntimeErrorBase as exc:
                log.warning("agent run %s: its output could not be read (%s)", run.id, exc)
                await trio.sleep(AGENT_RETRY * attempt)
                continue
            out, err, out_total, err_total = kept.stdout, kept.stderr, kept.stdout_bytes, kept.stderr_bytes
            break
        paths = artifact_paths(run.metadata) if self.state == "running" else []
        captured = await capture(agent, self.services.blobs, run.id, run.tenant_id, paths) if paths else []
        exit_code = final.get("exit_code")
        return Exited(
            exit_code=int(exit_code) if exit_code is not None else None,
            output=out[:OUTPUT_CAP].decode("utf-8", errors="replace"),
            stderr=err[:OUTPUT_CAP].decode("utf-8", errors="replace"),
            output_truncated=out_total > OUTPUT_CAP,
            stderr_truncated=err_total > OUTPUT_CAP,
            artifacts=captured,
            killed=final["status"] == "killed",
        )

    # -- record and events -----------------------------------------------------------------

    def _event(self, type_: str, data: dict[str, Any], run: AgentRunRecord | None = None) -> RunEvent:
        run = run or self.record
        return RunEvent(
            id=new_ulid(), run_id=run.id, tenant_id=run.tenant_id, target_id=run.target_id, type=type_, data=data,
            created_at=utc_now_iso(),
        )

    async def _publish(self, event: RunEvent, run: AgentRunRecord) -> None:
        await self.bus.announce(
            Event(
                f"agent_run.{event.type}",
                "agent_run",
                run.id,
                {**event.public(), "target_id": run.target_id, "target_kind": run.target_kind},
                tenant_id=run.tenant_id,
                id=event.id,
                created_at=event.created_at,
            )
        )

    async def _record_event(
        self, type_: str, data: dict[str, Any], state: str | None = None, *, before: RunEvent | None = None, **changes: Any
    ) -> None:
        """Write `changes` (and `state`) to the record and the event (after the event
        `before`, made earlier, when given) in one transaction; then publish them."""
        new_state = state or self.state
        now = utc_now_iso()
        values = {"status": new_state, **changes, "updated_at": now}
        events = [*([before] if before is not None else []), self._event(type_, data)]

        def write(tx: Transaction) -> None:
            store.update_run(tx, self.id, values)
            for event in events:
                store.insert_event(tx, event)

        await self.db.transaction(write)
        self.record = dataclasses.replace(self.record, **values)
        self.state = new_state
        self.mark_persisted()
        for event in events:
            await self._publish(event, self.record)

    async def _record_artifacts(self, artifacts: list[ArtifactRecord]) -> None:
        summary = [
            {"id": a.id, "path": a.path, "name": a.name, "status": a.status, "sha256": a.sha256, "size_bytes": a.size_bytes}
            for a in artifacts
        ]
        event = self._event("artifacts_recorded", {"artifacts": summary})

        def write(tx: Transaction) -> None:
            for artifact in artifacts:
                store.insert_artifact(tx, artifact)
            store.insert_event(tx, event)

        await self.db.transaction(write)
        await self._publish(event, self.record)

    async def _finish(self, status: str, exit_code: int | None, event_type: str, data: dict[str, Any], **changes: Any) -> None:
        finished = utc_now_iso()
        started = datetime.fromisoformat(self.record.started_at.replace("Z", "+00:00"))
        duration_ms = int((datetime.fromisoformat(finished.replace("Z", "+00:00")) - started).total_seconds() * 1000)
        await self._record_event(
            event_type,
            {**data, "exit_code": exit_code, "duration_ms": duration_ms},
            state=status,
            exit_code=exit_code,
            finished_at=finished,
            **changes,
        )

    async def _fail(self, exit_code: int | None, reason: str, **changes: Any) -> None:
        await self._finish("failed", exit_code, "failed", {"status": "failed", "reason": reason}, error=reason, **changes)


__all__ = ["AgentRunActor", "Cancel", "Exited", "GetRun", "Launch", "Lost", "TimedOut"]
