"""Applications inside a computer: installing `selected_apps`, reading what is installed.

Both run through the guest agent, inside the instance, with Debian's own tools:
`apt-get` from Debian's archive to install, `dpkg-query` to read. What is installed
is read from the instance rather than from the record, so an app the user installed
with apt, or removed, shows as it really is.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from corral.vm import AgentClient

from .templates import App, ComputerTemplate

INSTALL_OUTPUT_TAIL = 400


def install_command(apps: Iterable[App]) -> str:
    packages = sorted({package for app in apps for package in app.packages})
    quoted = " ".join(shlex.quote(p) for p in packages)
    return (
        "export DEBIAN_FRONTEND=noninteractive; "
        "apt-get update -q -o Acquire::Retries=3 && "
        f"apt-get install -y -q --no-install-recommends -o Acquire::Retries=3 {quoted}"
    )


async def install_apps(agent: AgentClient, apps: list[App], timeout: float) -> str | None:
    """Install `apps`; None on success, else a short description of the failure."""
    if not apps:
        return None
    result = await agent.exec(install_command(apps), timeout=timeout, cwd="/root", combined=True)
    if result.exit_code == 0:
        return None
    names = ", ".join(app.name for app in apps)
    reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    tail = result.output.strip()[-INSTALL_OUTPUT_TAIL:]
    return f"installing {names} failed ({reason}): {tail}"


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
