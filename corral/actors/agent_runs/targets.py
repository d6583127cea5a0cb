"""Where a run executes: a sandbox (as one of its background processes) or a computer.

Both kinds run the same guest agent, so a run is the same there: a process the
agent spawns and keeps, which the run actor follows and can stop. What differs is
how the target is found, whose env it starts from, and who records the process: on
a sandbox the sandbox's own process machinery (it is listed under `/processes`); on
a computer the run alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral.actors import computers, sandboxes
from corral.actors.computers.execution import activity
from corral.actors.sandboxes.processes import NewProcess, kill_process, start_process
from corral.errors import ApiError
from corral.ids import prefixed
from corral.vm import AgentClient, RuntimeErrorBase

from .services import AgentRunServices

KILL_GRACE = 5.0


@dataclass(frozen=True)
class Target:
    kind: str
    id: str
    tenant_id: str
    workspace_id: str | None


@dataclass(frozen=True)
class Spawned:
    process_id: str
    started_at: str


async def find_target(platform: AgentRunServices, tenant_id: str, kind: str, target_id: str, key_workspace_id: str | None) -> Target:
    """The tenant's target, running: 404 when it is not the tenant's, 409
    `SANDBOX_NOT_RUNNING` / `COMPUTER_NOT_RUNNING` when it is not running."""
    if kind == "sandbox":
        sandbox = await sandboxes.find_sandbox(platform, tenant_id, target_id)
        if sandbox.status != "running":
            raise ApiError(409, "SANDBOX_NOT_RUNNING", "sandbox is not running")
        return Target("sandbox", sandbox.id, tenant_id, sandbox.workspace_id)
    computer = await computers.find_computer(platform, tenant_id, target_id, key_workspace_id=key_workspace_id)
    if computer.status != "running":
        raise computers.not_running()
    return Target("computer", computer.id, tenant_id, computer.workspace_id)


async def agent_of(platform: AgentRunServices, kind: str, tenant_id: str, target_id: str) -> AgentClient:
    """The target's agent (409 when it is not running, 404 when it is gone)."""
    if kind == "sandbox":
        return await sandboxes.agent_for(platform, target_id, record_activity=False)
    computer = await computers.find_computer(platform, tenant_id, target_id)
    return await computers.agent_for(platform, computer, record_activity=False)


async def spawn(
    platform: AgentRunServices, target: Target, agent: AgentClient, cmd: str, cwd: str, env: dict[str, str], name: str,
    *, stdin: str, capture: int,
) -> Spawned:
    """Start `cmd` under /bin/sh -c in the target with the target's own variables,
    then `env`; on a sandbox as a sandbox process."""
    if target.kind == "sandbox":
        sandbox = await sandboxes.find_sandbox(platform, target.tenant_id, target.id)
        process = await start_process(platform, sandbox, NewProcess(cmd=cmd, cwd=cwd, env=env, name=name), stdin=stdin, capture=capture)
        return Spawned(process.id, process.started_at)
    computer = await computers.find_computer(platform, target.tenant_id, target.id)
    merged = {**await computers.resolved_env(platform, computer), **env}
    process_id = prefixed("proc")
    started: dict[str, Any] = await agent.spawn(
        cmd, cwd=cwd, env=merged, name=name, process_id=process_id, stdin=stdin, capture=capture
    )
    return Spawned(process_id, str(started.get("started_at") or ""))


async def stop(platform: AgentRunServices, kind: str, tenant_id: str, target_id: str, process_id: str) -> None:
    """SIGTERM to the process's group, SIGKILL after the grace period; on a sandbox
    through its process record, which then says `killed`."""
    with contextlib.suppress(ApiError, RuntimeErrorBase):
        if kind == "sandbox":
            await kill_process(platform, target_id, process_id)
            return
        agent = await agent_of(platform, kind, tenant_id, target_id)
        await agent.kill(process_id, grace=KILL_GRACE)


@contextlib.contextmanager
def busy(platform: AgentRunServices, kind: str, target_id: str) -> Iterator[None]:
    """A computer running a command is not idle (its idle watcher skips it)."""
    if kind != "computer":
        yield
        return
    with activity(platform).busy(target_id):
        yield
