"""Sandboxes: the actor that owns each one, and the operations the API calls."""

from .actor import SandboxActor
from .messages import Boot, Booted, Connect, Destroy, Fork, Get, Start, Stop, Suspend
from .service import (
    agent_for,
    create_sandbox,
    exec_command,
    find_sandbox,
    fork_sandbox,
    lifecycle,
    list_sandboxes,
    recover_interrupted,
    sandbox_public,
    touch,
)

__all__ = [
    "Boot",
    "Booted",
    "Connect",
    "Destroy",
    "Fork",
    "Get",
    "SandboxActor",
    "Start",
    "Stop",
    "Suspend",
    "agent_for",
    "create_sandbox",
    "exec_command",
    "find_sandbox",
    "fork_sandbox",
    "lifecycle",
    "list_sandboxes",
    "recover_interrupted",
    "sandbox_public",
    "touch",
]
