"""Talking to a running computer: its agent, exec, exec/python, installed apps, activity.

Every call here needs `running` (else `409 COMPUTER_NOT_RUNNING`); an agent that
does not answer is `502 AGENT_UNAVAILABLE`. Each call counts as activity for
auto-stop, and a command in flight keeps its computer from being stopped as idle
however long it runs (`Activity`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated, Any

import trio

from corral.actors.instances import (
    Command,
    ExecTimeout,
    InstanceFiles,
    RunningInstance,
    clamp_timeout,
    record_activity,
)
from corral.ids import new_ulid
from corral.models import Rule, model
from corral.vm import AgentClient, InstanceInfo, RuntimeErrorBase

from .activity import Activity
from .actor import ComputerActor, not_running
from .apps import installed_apps
from .env import resolved_env
from .messages import Connect
from .store import ComputerRecord
from .templates import get_template

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

EXEC_CWD = "/workspace"


def activity(platform: ComputerServices) -> Activity:
    """This node's tracker (made on first use: a platform built without the node has one too)."""
    if platform.computer_activity is None:
        platform.computer_activity = Activity()
    return platform.computer_activity


async def touch(platform: ComputerServices, computer_id: str) -> None:
    """Record activity (exec, files, apps) for auto-stop."""
    await record_activity(platform.system.ref(ComputerActor, computer_id))


async def agent_for(platform: ComputerServices, row: ComputerRecord, *, record_activity: bool = True) -> AgentClient:
    """The agent of a running computer; `409 COMPUTER_NOT_RUNNING` otherwise."""
    if row.status != "running":
        raise not_running()
    running: RunningInstance | None = platform.system.view_of(ComputerActor, row.id)  # no message while it runs
    info: InstanceInfo = running.info if running is not None else await (await platform.system.get(ComputerActor, row.id)).ask(Connect())
    if record_activity:
        await touch(platform, row.id)
    try:
        return platform.agents.client(info)
    except RuntimeErrorBase as exc:  # no address: it stopped meanwhile
        raise not_running() from exc


async def files_for(platform: ComputerServices, row: ComputerRecord) -> InstanceFiles:
    """The files of a running computer; `409 COMPUTER_NOT_RUNNING` otherwise."""
    return InstanceFiles(await agent_for(platform, row), ComputerActor.refusals)




@model
class ExecRequest:
    """A command under `/bin/sh -c`, stdout and stderr combined."""

    command: Command
    timeout: ExecTimeout = None


@model
class PythonRequest:
    """Python 3 code, run from a temporary file under /tmp that is deleted afterwards."""

    code: Annotated[str, Rule(strip=False)]
    timeout: ExecTimeout = None


async def _run(platform: ComputerServices, row: ComputerRecord, agent: AgentClient, command: str, timeout: int) -> dict[str, Any]:
    env = await resolved_env(platform, row)
    with activity(platform).busy(row.id):
        result = await agent.exec(command, timeout=timeout, cwd=EXEC_CWD, env=env, combined=True)
    await touch(platform, row.id)
    answer: dict[str, Any] = {"output": result.output, "exit_code": result.exit_code}
    if result.truncated:  # the specification's `{output, exit_code}`, unless output was cut
        answer["output_truncated"] = True
    return answer


async def exec_command(platform: ComputerServices, row: ComputerRecord, request: ExecRequest) -> dict[str, Any]:
    """`{output, exit_code}`: the command under /bin/sh -c, stdout and stderr combined,
    SIGTERM to its process group past the timeout (SIGKILL 2 s later)."""
    agent = await agent_for(platform, row)
    return await _run(platform, row, agent, request.command, clamp_timeout(request.timeout))


async def exec_python(platform: ComputerServices, row: ComputerRecord, request: PythonRequest) -> dict[str, Any]:
    """The code goes to a file under /tmp, runs with `python3 -u` under the timeout
    (unbuffered, so stdout and stderr interleave as written), and the file is deleted
    afterwards, also after a timeout."""
    code, timeout = request.code, clamp_timeout(request.timeout)
    agent = await agent_for(platform, row)
    path = f"/tmp/corral-exec-{new_ulid()}.py"
    quick = platform.settings.agent_timeout
    await agent.write_file(path, code.encode(), parents=False, timeout=quick)
    try:
        return await _run(platform, row, agent, f"exec python3 -u {path}", timeout)
    finally:  # shielded: a client that hangs up does not leave the file behind
        with trio.move_on_after(quick) as scope, contextlib.suppress(RuntimeErrorBase):
            scope.shield = True
            await agent.delete(path)


async def list_apps(platform: ComputerServices, row: ComputerRecord) -> list[dict[str, Any]]:
    """`[{name, version}]` read from the instance (dpkg), not from the record."""
    template = get_template(row.template_type)
    if template is None:
        return []
    agent = await agent_for(platform, row)
    return await installed_apps(agent, template)
