"""What the router's resolvers share: the host cookie a token is traded for, and
marking a resource active (for auto-stop) without a write on every request."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("corral.previews")

TOUCH_INTERVAL = 10.0
MAX_ENTRIES = 10_000


def token_cookie(name: str, token: str, expires: float | None, *, secure: bool) -> str:
    """`Set-Cookie` value: the token for this host only (HttpOnly, SameSite=Lax), until it expires."""
    parts = [f"{name}={token}", "Path=/", "HttpOnly", "SameSite=Lax"]
    if expires is not None:
        parts.append(f"Max-Age={max(0, int(expires - time.time()))}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def cleared_cookie(name: str) -> tuple[str, str]:
    """The header that drops a stale token cookie."""
    return ("Set-Cookie", f"{name}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0")


class ActivityMarks:
    """Calls `mark(resource_id)` in the background at most once every `TOUCH_INTERVAL` per resource."""

    def __init__(self, nursery: trio.Nursery, mark: Callable[[str], Awaitable[None]], kind: str) -> None:
        self._nursery = nursery
        self._mark = mark
        self._kind = kind
        self._marked: dict[str, float] = {}

    def touch(self, resource_id: str) -> None:
        now = time.monotonic()
        if now - self._marked.get(resource_id, -TOUCH_INTERVAL) < TOUCH_INTERVAL:
            return
        self._marked[resource_id] = now
        if len(self._marked) > MAX_ENTRIES:
            self._marked.clear()
        self._nursery.start_soon(self._record, resource_id)

    async def _record(self, resource_id: str) -> None:
        try:
            await self._mark(resource_id)
        except Exception:  # a failed activity mark must not take the platform down
            log.exception("marking %s %s active failed", self._kind, resource_id)
