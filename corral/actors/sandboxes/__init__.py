"""Sandboxes: the actor that owns each one, and the operations the API calls."""

from . import env, processes, store
from .access import agent_for, files_for, touch
from .actor import SandboxActor
from .credits import register_with_billing
from .event_types import EVENT_TYPES, LOG_TYPES
from .idle import idle_watch
from .messages import Boot, Booted, Connect, Destroy, Fork, Get, Start, Stop, Suspend
from .process_actor import ProcessActor
from .service import (
    ExecRequest,
    NewSandbox,
    create_sandbox,
    exec_command,
    find_running_sandbox,
    find_sandbox,
    fork_sandbox,
    lifecycle,
    list_sandboxes,
    recover_interrupted,
    sandbox_public,
    start_background,
)
from .store import SandboxRecord
from .warm_pool import WarmPool, sandbox_spec

ACTORS = (SandboxActor, ProcessActor)
"""The package's actor kinds, registered by the node before anything refers to them by kind."""

__all__ = [
    "ACTORS",
    "EVENT_TYPES",
    "LOG_TYPES",
    "Boot",
    "Booted",
    "Connect",
    "Destroy",
    "ExecRequest",
    "Fork",
    "Get",
    "NewSandbox",
    "ProcessActor",
    "SandboxActor",
    "SandboxRecord",
    "Start",
    "Stop",
    "Suspend",
    "WarmPool",
    "agent_for",
    "create_sandbox",
    "env",
    "exec_command",
    "files_for",
    "find_running_sandbox",
    "find_sandbox",
    "fork_sandbox",
    "idle_watch",
    "lifecycle",
    "list_sandboxes",
    "processes",
    "recover_interrupted",
    "register_with_billing",
    "sandbox_public",
    "sandbox_spec",
    "start_background",
    "store",
    "touch",
]
