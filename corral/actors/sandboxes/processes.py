"""Background process operations the HTTP layer calls: start, list, get, kill, logs, follow."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from corral.actors.instances import Command, CommandEnv
from corral.actors.runtime_errors import answer_for, public_text
from corral.actors.sandboxes.services import SandboxServices
from corral.errors import ApiError, not_found
from corral.ids import prefixed
from corral.models import ABSOLUTE_PATH, Rule, model
from corral.storage import Event, utc_now_iso
from corral.vm import AgentClient, RuntimeErrorBase

from . import process_store
from .access import agent_for, touch
from .env import resolved_env
from .process_actor import (
    Finished,
    GetProcess,
    Kill,
    ProcessActor,
    halt_processes,
    resume_watchers,
)
from .process_store import ProcessRecord
from .store import SandboxRecord

DEFAULT_CWD = "/workspace"
DEFAULT_TAIL = 200
MAX_TAIL = 10_000
MAX_NAME = 100

PUBLIC_FIELDS = ("pid", "name", "cmd", "cwd", "status", "started_at", "exited_at", "exit_code")


def process_public(process: ProcessRecord) -> dict[str, Any]:
    return {"pid": process.id, **{name: getattr(process, name) for name in PUBLIC_FIELDS[1:]}}


@model
class NewProcess:
    """A background process, run as `/bin/sh -c cmd` with the sandbox env, then `env`."""

    cmd: Command
    cwd: Annotated[str | None, Rule(pattern=f"(?:{ABSOLUTE_PATH})?", allow_empty=True, message="must be an absolute path", schema={"default": DEFAULT_CWD})] = None
    env: CommandEnv = None
    name: Annotated[str | None, Rule(max_length=MAX_NAME, message=f"must be a non-empty string of at most {MAX_NAME} characters")] = None

    @property
    def directory(self) -> str:
        return self.cwd or DEFAULT_CWD

    @property
    def label(self) -> str:
        """The given name, or the command's first word."""
        return (self.name or self.cmd.split()[0])[:MAX_NAME]


async def start_process(
    platform: SandboxServices, sandbox: SandboxRecord, new: NewProcess, *, stdin: str | None = None, capture: int = 0
) -> ProcessRecord:
    """Spawn under /bin/sh -c with the sandbox env then the request's; the record is `error`
    (and the answer 500 PROCESS_START_FAILED) when the spawn fails. `stdin` and `capture`
    go to the agent (an agent run's prompt, and its exactly kept output)."""
    agent = await agent_for(platform, sandbox.id, record_activity=False)
    env = {**await resolved_env(platform, sandbox), **(new.env or {})}
    process_id = prefixed("proc")
    now = utc_now_iso()
    draft = ProcessRecord(
        id=process_id, sandbox_id=sandbox.id, tenant_id=sandbox.tenant_id, name=new.label, cmd=new.cmd,
        cwd=new.directory, status="running", exit_code=None, error=None, final_logs=None, log_seq=0,
        started_at=now, exited_at=None, updated_at=now,
    )
    try:
        started = await agent.spawn(
            new.cmd, cwd=new.directory, env=env, name=new.label, process_id=process_id, stdin=stdin, capture=capture
        )
    except RuntimeErrorBase as exc:
        public = public_text(exc, f"sandbox {sandbox.id} process {process_id}")
        failed = dataclasses.replace(draft, status="error", error=public[:1000], exited_at=utc_now_iso())
        await platform.system.create(ProcessActor, process_id, failed)
        status, code = answer_for(exc)
        if code == "PROCESS_START_FAILED" or (status >= 500 and status != 502):
            raise ApiError(500, "PROCESS_START_FAILED", f"the process could not be started: {public}") from exc
        raise ApiError(status, code, public) from exc
    draft = dataclasses.replace(draft, started_at=started.get("started_at") or now)
    await platform.bus.publish(
        Event(
            "sandbox.process.started",
            "sandbox",
            sandbox.id,
            {"pid": process_id, "name": new.name, "cmd": new.cmd},
            tenant_id=sandbox.tenant_id,
        )
    )
    await platform.system.create(ProcessActor, process_id, draft)  # activation starts its watcher
    await touch(platform, sandbox.id)
    return draft


async def list_processes(platform: SandboxServices, sandbox_id: str) -> list[ProcessRecord]:
    return await process_store.of_sandbox(platform.db, sandbox_id)


async def find_process(platform: SandboxServices, sandbox_id: str, process_id: str) -> ProcessRecord:
    process = await process_store.find(platform.db, sandbox_id, process_id)
    if process is None:
        raise not_found("process not found")
    return process


async def kill_process(platform: SandboxServices, sandbox_id: str, process_id: str) -> ProcessRecord:
    """SIGTERM, then SIGKILL after the grace period, to the whole process group.
    Deleting a process that already ended changes nothing."""
    row = await find_process(platform, sandbox_id, process_id)
    if row.status != "running":
        return row
    ref = await platform.system.get(ProcessActor, process_id)
    try:
        result: ProcessRecord = await ref.ask(Kill(), timeout=60)
    except ApiError as exc:
        if exc.code != "PROCESS_NOT_RUNNING":  # it ended while we asked
            raise
        result = await ref.ask(GetProcess())
    return result


async def process_logs(platform: SandboxServices, sandbox_id: str, process_id: str, tail: int) -> list[str]:
    """The last `tail` lines: from the agent while it has them, else from the record."""
    row = await find_process(platform, sandbox_id, process_id)
    with contextlib.suppress(ApiError, RuntimeErrorBase):
        if row.status == "running" or row.final_logs is None:
            agent = await agent_for(platform, sandbox_id, record_activity=False)
            return [line["line"] for line in (await agent.logs(process_id, tail=tail))["lines"]]
    saved = json.loads(row.final_logs or "[]")
    return [line["line"] for line in saved[-tail:]] if tail > 0 else []


@dataclass(frozen=True)
class Ended:
    """The end of a followed process: every line has been sent."""

    status: str
    exit_code: int | None


async def follow_logs(
    platform: SandboxServices, sandbox_id: str, process_id: str, after: int, wait: float
) -> AsyncIterator[list[dict[str, Any]] | Ended]:
    """Batches of log lines after sequence `after` (`{id, ts, stream, line}`); an empty
    batch when `wait` passed without one (time for a heartbeat); `Ended` once the
    process has ended and every line has been sent."""
    row = await find_process(platform, sandbox_id, process_id)
    agent: AgentClient | None = None
    if row.status == "running" or row.final_logs is None:
        with contextlib.suppress(ApiError):
            agent = await agent_for(platform, sandbox_id, record_activity=False)
    while agent is not None:
        try:
            batch = await agent.logs_after(process_id, after, wait=wait)
        except RuntimeErrorBase:
            break  # the instance stopped or restarted: serve what the record kept
        lines = batch["lines"]
        if lines:
            after = int(batch["next"])
        yield lines
        final = batch["process"]
        if final["status"] != "running" and not lines:
            yield Ended(final["status"], final.get("exit_code"))
            return
    row = await find_process(platform, sandbox_id, process_id)
    saved = [line for line in json.loads(row.final_logs or "[]") if int(line["id"]) > after]
    if saved:
        yield saved
    yield Ended("killed" if row.status == "running" else row.status, row.exit_code)


__all__ = [
    "Ended",
    "Finished",
    "follow_logs",
    "halt_processes",
    "kill_process",
    "list_processes",
    "process_logs",
    "process_public",
    "resume_watchers",
    "start_process",
]
