"""Auto-stop of computers: stopped after `auto_stop` idle seconds (0 disables).

Activity is the computer's `last_activity_at`: written by exec, exec/python, the
files API, the apps list, start, restart and a change of the auto-stop setting; a
command still running counts as activity however long it takes (`is_busy`). The
one idle watcher of every instance kind (`corral.actors.instances.idle`) sends an
idle computer `IdleStop`, whose handler re-reads `last_activity_at`, emits
`computer.idle {computer_id, idle_seconds}` and stops it with reason `idle`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.actors.instances import IdleWatch, stop_idle

from .actor import ComputerActor
from .execution import activity
from .messages import IdleStop

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices


def idle_watch(platform: ComputerServices) -> IdleWatch:
    return IdleWatch("computers", ComputerActor, IdleStop, is_busy=activity(platform).is_busy)


async def stop_idle_computers(platform: ComputerServices) -> int:
    """One round for computers; returns how many stopped."""
    return await stop_idle(platform.db, platform.system, idle_watch(platform))
