"""A sandbox's activity, which auto-stop measures idleness from.

Told to the sandbox's actor (`Touch`), which writes `last_activity_at`: exec, files,
process output and preview traffic happen outside the sandbox's mailbox and must not
wait on it. A full mailbox drops the touch: the messages queued there are activity
enough. By kind name, because the process actor (a child of the sandbox, imported
by it) reports activity too.
"""

from __future__ import annotations

import contextlib

from corral.actors.errors import ActorStopped, MailboxFull
from corral.actors.instances.messages import Touch
from corral.actors.sandboxes.services import SandboxServices
from corral.errors import ApiError

SANDBOX_KIND = "sandbox"


async def touch(platform: SandboxServices, sandbox_id: str) -> None:
    """Record activity (exec, files, processes, preview) for auto-stop."""
    with contextlib.suppress(MailboxFull, ActorStopped, ApiError):
        await platform.system.ref_of_kind(SANDBOX_KIND, sandbox_id).tell(Touch())
