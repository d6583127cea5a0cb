"""Applications inside a computer: installing `selected_apps`, reading what is installed.

Both run through the guest agent, inside the instance, with Debian's own tools:
`apt-get` from Debian's archive to install, `dpkg-query` to read. What is installed
is read from the instance rather than from the record, so an app the user installed
with apt, or removed, shows as it really is.

An install runs as one of the agent's background processes (id `apps-install-…`),
not as a plain exec: the agent keeps its output line by line with timestamps, so
the computer's logs (`logs.py`) show it as source `apps`, live and afterwards.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

import trio

from corral.ids import new_ulid
from corral.vm import AgentClient

from .templates import App, ComputerTemplate

INSTALL_OUTPUT_TAIL = 400
INSTALL_PROCESS_PREFIX = "apps-install-"
"""The agent process id of an install starts with this (the logs' source `apps`)."""
INSTALL_TAIL_LINES = 40
KILL_GRACE = 5.0
LONG_POLL = 25.0


def install_command(apps: Iterable[App]) -> str:
    packages = sorted({package for app in apps for package in app.packages})
    quoted = " ".join(shlex.quote(p) for p in packages)
    return (
        "export DEBIAN_FRONTEND=noninteractive; "
        "apt-get update -q -o Acquire::Retries=3 && "
        f"apt-get install -y -q --no-install-recommends -o Acquire::Retries=3 {quoted}"
    )


async def install_apps(agent: AgentClient, apps: list[App], timeout: float) -> str | None:
    """Install `apps`; None on success, else a short description of the failure.

    Past `timeout` seconds the install gets SIGTERM (SIGKILL `KILL_GRACE` later)."""
    if not apps:
        return None
    process_id = INSTALL_PROCESS_PREFIX + new_ulid()
    await agent.spawn(install_command(apps), cwd="/root", name="apps", process_id=process_id)
    timed_out = False
    process: dict[str, Any] | None = None
    with trio.move_on_after(timeout):
        process = await _exited(agent, process_id)
    if process is None:
        timed_out = True
        process = await agent.kill(process_id, grace=KILL_GRACE)
    if process.get("exit_code") == 0 and not timed_out:
        return None
    names = ", ".join(app.name for app in apps)
    reason = "timed out" if timed_out else f"exit code {process.get('exit_code')}"
    lines = (await agent.logs(process_id, tail=INSTALL_TAIL_LINES))["lines"]
    tail = "\n".join(line["line"] for line in lines).strip()[-INSTALL_OUTPUT_TAIL:]
    return f"installing {names} failed ({reason}): {tail}"


async def _exited(agent: AgentClient, process_id: str) -> dict[str, Any]:
    """The agent's record of the process once it has exited (long-polling its logs)."""
    after = 0
    while True:
        batch = await agent.logs_after(process_id, after, wait=LONG_POLL)
        after = int(batch["next"])
        if batch["process"]["status"] != "running":
            process: dict[str, Any] = batch["process"]
            return process


def _known_apps(template: ComputerTemplate) -> list[App]:
    return [*template.base_apps, *template.catalog.values()]


async def installed_apps(agent: AgentClient, template: ComputerTemplate) -> list[dict[str, Any]]:
    """`[{name, version}]` of the template's base and catalog apps installed in the instance."""
    apps = _known_apps(template)
    packages = sorted({p for app in apps for p in app.packages})
    command = (
        "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Status}\\n' "
        + " ".join(shlex.quote(p) for p in packages)
        + " 2>/dev/null; true"
    )
    result = await agent.exec(command, timeout=30, cwd="/", combined=False)
    versions: dict[str, str] = {}
    for line in result.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2] == "installed":
            versions[parts[0]] = parts[1]
    return [
        {"name": app.name, "version": versions[app.packages[0]]}
        for app in apps
        if all(package in versions for package in app.packages)
    ]
