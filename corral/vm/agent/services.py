"""Services a template asks the agent to start when it comes up (a desktop's X server).

A template lists them in `/etc/corral/services.json` as `[{name, command, env?}]`.
Each runs as a managed background process with the id `svc-<name>`, so its output is
kept and readable like any process's (the computer's logs read it from there), and
it stops with the instance. A template without the file has no services.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .errors import AgentError
from .processes import ProcessTable

SERVICES_FILE = Path("/etc/corral/services.json")
SERVICE_PREFIX = "svc-"

log = logging.getLogger("corral.agent.services")


def service_list(path: Path = SERVICES_FILE) -> list[dict[str, object]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return []
    return [item for item in data if isinstance(item, dict) and item.get("name") and item.get("command")]


async def start_services(processes: ProcessTable, path: Path = SERVICES_FILE) -> list[str]:
    """Start every service of the template; the ids of those that started."""
    started = []
    for service in service_list(path):
        name, command = str(service["name"]), str(service["command"])
        env = service.get("env")
        try:
            await processes.spawn(
                command,
                cwd="/",
                env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else None,
                name=name,
                process_id=SERVICE_PREFIX + name,
            )
        except (AgentError, OSError) as exc:
            log.warning("service %s did not start: %s", name, exc)
            continue
        started.append(SERVICE_PREFIX + name)
    return started
