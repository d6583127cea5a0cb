"""The CUA session actor: the one writer of a session's row and of its events.

| state | message | next | effects |
|---|---|---|---|
| (none) | create | active | the row |
| active | `RecordAction` | active | `action_count` + 1; `cua.action` (and `cua.screenshot`) |
| active | `EndSession` | ended | `ended_at`; `cua.ended {session_id}` |
| ended | `EndSession` | ended | nothing: ending twice answers the ended session |
| ended | `RecordAction` | | `409 SESSION_ENDED` |

The actions themselves run in the request (`actions.py`), beside the mailbox: a 30 s
`wait` never holds up `end`, and the actor only counts and publishes what ran. Its
events have resource type `cua_session` and the session's id, so the session's
stream replays them from the event log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.actor import handles
from corral.actors.messages import Message
from corral.actors.record import RecordActor
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.storage import Event, utc_now_iso

from .store import CUA_SESSIONS, CuaSessionRecord

RESOURCE_TYPE = "cua_session"
ACTION_EVENT = "cua.action"
SCREENSHOT_EVENT = "cua.screenshot"
ENDED_EVENT = "cua.ended"
EVENT_TYPES = (ACTION_EVENT, SCREENSHOT_EVENT, ENDED_EVENT)


def session_not_found() -> ApiError:
    return ApiError(404, "NOT_FOUND", "cua session not found")


def session_ended() -> ApiError:
    return ApiError(409, "SESSION_ENDED", "cua session has ended")


@dataclass(frozen=True)
class GetSession(Message):
    """Ask for the session record."""


@dataclass(frozen=True)
class RecordAction(Message):
    """An action that ran: count it and publish `cua.action` (a screenshot also
    `cua.screenshot {action_id, width, height}`)."""

    action_id: str
    action: str
    params: dict[str, Any] = field(hash=False)
    ok: bool
    duration_ms: int
    screen: tuple[int, int] | None = None
    """A screenshot's width and height."""


@dataclass(frozen=True)
class EndSession(Message):
    """End the session (`cua.ended` the first time)."""


class CuaSessionActor(RecordActor):
    kind = "cua_session"
    store = CUA_SESSIONS
    record: CuaSessionRecord
    updated_at_column = None
    transitions = TransitionTable(
        {
            ("active", RecordAction): "active",
            (("active", "ended"), EndSession): "ended",
            ("*", GetSession): "*",
        },
        refusals={RecordAction: ("SESSION_ENDED", "cua session has ended")},
    )

    def not_found(self) -> ApiError:
        return session_not_found()

    async def create_record(self, draft: CuaSessionRecord) -> CuaSessionRecord:
        await self.db.transaction(lambda tx: self.store.insert(tx, draft))
        return draft

    def describe(self) -> dict[str, Any]:
        return {"computer_id": self.record.computer_id, "action_count": self.record.action_count}

    @handles(GetSession)
    async def get(self, message: GetSession) -> CuaSessionRecord:
        return self.record

    @handles(RecordAction)
    async def record_action(self, message: RecordAction) -> CuaSessionRecord:
        next_state = self.transition(message)
        await self.persist(state=next_state, action_count=self.record.action_count + 1)
        await self.publish(
            ACTION_EVENT,
            {
                "action_id": message.action_id,
                "action": message.action,
                "params": message.params,
                "ok": message.ok,
                "duration_ms": message.duration_ms,
            },
        )
        if message.screen is not None:
            width, height = message.screen
            await self.publish(SCREENSHOT_EVENT, {"action_id": message.action_id, "width": width, "height": height})
        return self.record

    @handles(EndSession)
    async def end(self, message: EndSession) -> CuaSessionRecord:
        was_active = self.state == "active"
        next_state = self.transition(message)
        if was_active:
            await self.persist(state=next_state, ended_at=utc_now_iso())
            await self.publish(ENDED_EVENT, {"session_id": self.id})
        return self.record

    async def publish(self, event_type: str, data: dict[str, Any]) -> Event:
        """`cua.*` events about this session (not `cua_session.*`: the contract's names)."""
        return await self.bus.publish(Event(event_type, RESOURCE_TYPE, self.id, data, tenant_id=self.tenant_id))
