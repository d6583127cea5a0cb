"""A sandbox's last activity, which auto-stop measures idleness from.

A plain write (no actor): exec, files, process output and preview traffic happen
outside the sandbox's mailbox and must not queue behind it.
"""

from __future__ import annotations

from corral.actors.sandboxes.services import SandboxServices
from corral.storage import utc_now_iso


async def touch(platform: SandboxServices, sandbox_id: str) -> None:
    """Record activity (exec, files, processes, preview) for auto-stop."""
    await platform.db.execute("UPDATE sandboxes SET last_activity_at = ? WHERE id = ?", (utc_now_iso(), sandbox_id))
