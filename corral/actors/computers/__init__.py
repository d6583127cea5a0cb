"""Computers: the actor that owns each one, and the operations the API calls.

Modules: `actor` (state table, instance lifecycle), `messages`, `service` (create,
list, lifecycle, clone, resize, move), `execution` (agent, exec, apps, activity),
`env` (encrypted environment), `metrics` (cgroup sampler), `idle` (auto-stop),
`templates` and `apps` (what a template_type offers), `profiles` (agent runtime
profiles), `billing_hooks` (allowance and meter), `credits` (the stopper billing
calls when credits run out); snapshots of the files: `snapshots` (rows,
messages, the actor's handlers) and `snapshot_service` (what the API calls);
`desktop` (desktop control), `cua` (CUA sessions, a subpackage) and `logs` (the
desktop services' and app installs' output).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import cua, logs, store
from .actor import ComputerActor, computer_not_found, not_running
from .credits import register_with_billing
from .env import SetEnvVar, delete_env, env_public, list_env, resolved_env, set_env
from .execution import (
    ExecRequest,
    PythonRequest,
    agent_for,
    exec_command,
    exec_python,
    files_for,
    list_apps,
    touch,
)
from .idle import idle_watch, stop_idle_computers
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
from .metrics import Sampler, computer_metrics, start_sampler
from .records import SIZE_NAMES, computer_public, computer_summary, computer_urls
from .service import (
    FILTERS,
    AutoStop,
    MoveTo,
    NewComputer,
    ResizeRequest,
    UpdateComputer,
    auto_stop_public,
    clone_computer,
    create_computer,
    delete_computer,
    find_computer,
    list_computers,
    move_computer,
    pause_computer,
    recover_provisioning,
    refuse_fixed_fields,
    regions,
    require_member,
    resize_computer,
    restart_computer,
    set_auto_stop,
    start_computer,
    stop_computer,
    update_computer,
)
from .services import AgentRuntimeProfile, ProfileResolver
from .snapshot_service import (
    NewSnapshot,
    delete_snapshot,
    get_snapshot,
    list_snapshots,
    recover_snapshots,
    restore_snapshot,
    take_snapshot,
)
from .snapshots import (
    DeleteSnapshot,
    RestoreSnapshot,
    SnapshotRecord,
    SnapshotTaken,
    TakeSnapshot,
    snapshot_public,
)
from .store import ComputerRecord
from .templates import App, ComputerTemplate, get_template, register_template, template_types
from .terminal import NewTerminal, TerminalSize, open_terminal, resize_terminal

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices


async def start_background(platform: ComputerServices) -> None:
    """At start-up: resume interrupted provisioning, fail snapshot copies a restart cut
    short, start the metrics sampler. (Billing hooks and the one idle watcher are the
    node's to start.)"""
    await recover_provisioning(platform)
    await recover_snapshots(platform)
    await start_sampler(platform)


__all__ = [
    "FILTERS",
    "SIZE_NAMES",
    "AgentRuntimeProfile",
    "App",
    "AutoStop",
    "Boot",
    "Booted",
    "Clone",
    "ComputerActor",
    "ComputerRecord",
    "ComputerTemplate",
    "Connect",
    "DeleteSnapshot",
    "Destroy",
    "ExecRequest",
    "Get",
    "IdleStop",
    "Move",
    "MoveTo",
    "NewComputer",
    "NewSnapshot",
    "NewTerminal",
    "Pause",
    "ProfileResolver",
    "PythonRequest",
    "Resize",
    "ResizeRequest",
    "Restart",
    "RestoreSnapshot",
    "Sampler",
    "SetEnvVar",
    "SnapshotRecord",
    "SnapshotTaken",
    "Start",
    "Stop",
    "TakeSnapshot",
    "TerminalSize",
    "Update",
    "UpdateComputer",
    "agent_for",
    "auto_stop_public",
    "clone_computer",
    "computer_metrics",
    "computer_not_found",
    "computer_public",
    "computer_summary",
    "computer_urls",
    "create_computer",
    "cua",
    "delete_computer",
    "delete_env",
    "delete_snapshot",
    "env_public",
    "exec_command",
    "exec_python",
    "files_for",
    "find_computer",
    "get_snapshot",
    "get_template",
    "idle_watch",
    "list_apps",
    "list_computers",
    "list_env",
    "list_snapshots",
    "logs",
    "move_computer",
    "not_running",
    "open_terminal",
    "pause_computer",
    "recover_provisioning",
    "recover_snapshots",
    "refuse_fixed_fields",
    "regions",
    "register_template",
    "register_with_billing",
    "require_member",
    "resize_computer",
    "resize_terminal",
    "resolved_env",
    "restart_computer",
    "restore_snapshot",
    "set_auto_stop",
    "set_env",
    "snapshot_public",
    "start_background",
    "start_computer",
    "start_sampler",
    "stop_computer",
    "stop_idle_computers",
    "store",
    "take_snapshot",
    "template_types",
    "touch",
    "update_computer",
]
