"""Terminals of a computer (contract §10): shells on PTYs in the guest agent.

The agent owns the sessions (`corral.vm.agent.terminals`): it keeps each shell, its
recent output and its size, and ends a session 60 s after its last client left. The
control plane opens and resizes them here, with the computer's environment (its
sealed variables too, as exec has them); the browser reaches a session's WebSocket
through the preview router (`corral.actors.previews.desktops`). The agent's errors
(404 for an unknown session, 422 for a shell that is not there) are the answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from corral.models import Rule, model

from .env import resolved_env
from .execution import agent_for
from .store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

TerminalSide = Annotated[int, Rule(minimum=1, maximum=1000, message="must be an integer from 1 to 1000")]


@model
class NewTerminal:
    cols: TerminalSide = 80
    rows: TerminalSide = 24
    shell: Annotated[str, Rule(max_length=4096, description="an executable in the computer")] = "/bin/bash"


@model
class TerminalSize:
    cols: TerminalSide
    rows: TerminalSide


async def open_terminal(platform: ComputerServices, row: ComputerRecord, request: NewTerminal) -> dict[str, Any]:
    """A new session: `{session_id, shell, cols, rows, pid, attached}` (422 for a shell that is not there)."""
    agent = await agent_for(platform, row)
    env = await resolved_env(platform, row)
    return await agent.open_terminal(request.cols, request.rows, request.shell, env)


async def resize_terminal(platform: ComputerServices, row: ComputerRecord, session_id: str, size: TerminalSize) -> dict[str, Any]:
    """The session at its new size (the shell gets SIGWINCH); 404 NOT_FOUND for an unknown session."""
    agent = await agent_for(platform, row)
    return await agent.resize_terminal(session_id, size.cols, size.rows)
