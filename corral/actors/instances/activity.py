"""Activity for auto-stop, told to the instance's actor, and the new instance's columns.

Exec, files, process output and preview traffic happen outside the actor's mailbox
and must not wait on it, so activity is told (`Touch`), never asked; the actor writes
`last_activity_at`. A full mailbox drops the touch: what is queued there is activity
enough.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import dataclass
from typing import Any

from corral.actors.errors import ActorStopped, MailboxFull
from corral.actors.ref import ActorRef
from corral.actors.tenancy import Attribution
from corral.errors import ApiError
from corral.storage import utc_now_iso

from .messages import Touch

TOUCH_EVERY = 0.25
"""Seconds within which a further use of an instance is not told again: a tight loop of
execs then wakes the actor a few times a second instead of once an exec (issue 28),
and auto-stop, counted in whole seconds, sees activity at most this much older."""
_MAX_REMEMBERED = 10_000

_told: weakref.WeakKeyDictionary[object, dict[str, float]] = weakref.WeakKeyDictionary()
"""When each instance was last told, per actor system (tests run several in one process)."""


async def record_activity(ref: ActorRef[Any]) -> None:
    """Tell the instance's actor that it was used now (unless it was told within
    `TOUCH_EVERY`)."""
    told = _told.get(ref.system)
    if told is None:
        told = _told[ref.system] = {}
    now = time.monotonic()
    if now - told.get(ref.id, -TOUCH_EVERY) < TOUCH_EVERY:
        return
    if len(told) >= _MAX_REMEMBERED:
        told.clear()
    told[ref.id] = now
    with contextlib.suppress(MailboxFull, ActorStopped, ApiError):
        await ref.tell(Touch())


@dataclass(frozen=True)
class InstanceDraft:
    """What every new instance's row starts from (`ActorSystem.create`); each kind's
    draft adds its own fields."""

    attribution: Attribution
    owner_user_id: str | None

    def fresh_columns(self) -> dict[str, Any]:
        """Attribution, owner, no error, and now as creation, update and last activity."""
        now = utc_now_iso()
        return {
            **self.attribution.as_dict(),  # tenant, workspace, project and the external ids
            "owner_user_id": self.owner_user_id,
            "error": None,
            "last_activity_at": now,
            "created_at": now,
            "updated_at": now,
        }
