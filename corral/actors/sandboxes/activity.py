"""A sandbox's activity, which auto-stop measures idleness from.

Told to the sandbox's actor (`corral.actors.instances.record_activity`). By kind name,
because the process actor (a child of the sandbox, imported by it) reports activity too.
"""

from __future__ import annotations

from corral.actors.instances.activity import record_activity
from corral.actors.sandboxes.services import SandboxServices

SANDBOX_KIND = "sandbox"


async def touch(platform: SandboxServices, sandbox_id: str) -> None:
    """Record activity (exec, files, processes, preview) for auto-stop."""
    await record_activity(platform.system.ref_of_kind(SANDBOX_KIND, sandbox_id))
