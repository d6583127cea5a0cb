"""What the node holds of the preview access cache: the interface both its holder
(`services.PreviewServices`) and its implementation (`access.PreviewAccess`) import.

`PreviewAccess` needs the node's services, and the services hold the one
`PreviewAccess` of the node; naming this interface here, rather than the class,
keeps the two modules from importing each other.
"""

from __future__ import annotations

import re
from typing import Protocol

import trio

from corral.net.preview import Forward, PreviewRequest, Reply


class AccessCache(Protocol):
    """The router's sandbox resolver and the caches behind it, which the API drops
    entries from when what they hold changes."""

    def forget_sandbox(self, sandbox_id: str) -> None: ...

    def forget_share(self, share_id: str) -> None: ...

    def forget_all(self) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drop cached sandboxes on their lifecycle events (until cancelled)."""

    async def resolve_sandbox(self, request: PreviewRequest, match: re.Match[str] | None) -> Forward | Reply:
        """Where a request to a sandbox's preview host goes, or the page that refuses it."""
