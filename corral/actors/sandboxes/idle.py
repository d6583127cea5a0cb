"""Auto-stop of sandboxes: idle ones are suspended (processes halted, files kept).

Activity is the sandbox's `last_activity_at`, written by exec, files, process start
and output, and preview traffic. The one idle watcher of every instance kind
(`corral.actors.instances.idle`) sends an idle sandbox `Suspend`; its actor emits
`sandbox.idle {sandbox_id, last_activity_at}`, suspends it and emits
`sandbox.suspended`; `start` resumes it.
"""

from __future__ import annotations

from corral.actors.instances import IdleWatch

from .actor import SandboxActor
from .messages import Suspend


def idle_watch() -> IdleWatch:
    return IdleWatch("sandboxes", SandboxActor, lambda idle, seen: Suspend(idle, seen))
