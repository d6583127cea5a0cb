"""CUA session operations the HTTP layer calls: create, list, get, act, end, ticket.

A session is a record of one computer-use agent's run on one computer: its task,
metadata and how many actions it took; the actions themselves are events on the
session's stream. Reads use the store; every write goes through the session's actor.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated, Any

from corral.actors.tenancy import tickets
from corral.ids import is_uuid
from corral.models import Rule, field, model
from corral.storage import utc_now_iso

from ..store import ComputerRecord
from . import store
from .actions import Outcome, parse_action, run_action
from .actor import CuaSessionActor, EndSession, RecordAction, session_ended, session_not_found
from .store import CuaSessionRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

TICKET_TTL = 3600
"""Seconds a session's SSE ticket stays valid (the specification's CUA ticket)."""
MAX_TASK = 10_000
MAX_METADATA = 100
ASK_TIMEOUT = 30.0


def ticket_purpose(session_id: str) -> str:
    """What a session's ticket opens: that session's event stream, nothing else."""
    return f"cua:{session_id}"


@model
class NewSession:
    """What the agent is about to do, and anything the caller wants kept with it."""

    task: Annotated[str | None, Rule(max_length=MAX_TASK, strip=False, allow_empty=True, message=f"must be text of at most {MAX_TASK} characters, or null")] = None
    metadata: Annotated[dict[str, Any], Rule(max_length=MAX_METADATA, message=f"must be an object of at most {MAX_METADATA} entries")] = field(default_factory=dict)


def session_public(session: CuaSessionRecord) -> dict[str, Any]:
    """The contract's session record."""
    return {
        "id": session.id,
        "computer_id": session.computer_id,
        "status": session.status,
        "task": session.task,
        "metadata": session.metadata,
        "action_count": session.action_count,
        "created_at": session.created_at,
        "ended_at": session.ended_at,
    }


async def create_session(platform: ComputerServices, computer: ComputerRecord, new: NewSession) -> CuaSessionRecord:
    """A new `active` session of the computer (in any state: actions need it running)."""
    draft = CuaSessionRecord(
        id=str(uuid.uuid4()),
        computer_id=computer.id,
        tenant_id=computer.tenant_id,
        status="active",
        task=new.task,
        metadata=new.metadata,
        action_count=0,
        created_at=utc_now_iso(),
        ended_at=None,
    )
    await platform.system.create(CuaSessionActor, draft.id, draft)
    return draft


async def list_sessions(platform: ComputerServices, computer: ComputerRecord) -> list[CuaSessionRecord]:
    return await store.of_computer(platform.db, computer.id)


async def find_session(platform: ComputerServices, computer: ComputerRecord, session_id: str) -> CuaSessionRecord:
    """The computer's session; `404 NOT_FOUND` for another computer's or an unknown id."""
    session = await store.find(platform.db, computer.id, session_id) if is_uuid(session_id) else None
    if session is None:
        raise session_not_found()
    return session


async def perform_action(
    platform: ComputerServices, computer: ComputerRecord, session: CuaSessionRecord, body: dict[str, Any]
) -> Outcome:
    """Run the action of `body` on the desktop and record it on the session.

    An ended session refuses first (`409 SESSION_ENDED`), then the body is checked
    as the desktop route checks it, then the computer must be running."""
    if session.status != "active":
        raise session_ended()
    action, request = parse_action(body)
    outcome = await run_action(platform, computer, action, request)
    ref = platform.system.ref(CuaSessionActor, session.id)
    message = RecordAction(outcome.action_id, outcome.action, outcome.params, outcome.ok, outcome.duration_ms, outcome.screen)
    await ref.ask(message, timeout=ASK_TIMEOUT)
    return outcome


async def end_session(platform: ComputerServices, session: CuaSessionRecord) -> CuaSessionRecord:
    """End it (`cua.ended`, which closes its streams); an ended session stays as it is."""
    ref = platform.system.ref(CuaSessionActor, session.id)
    ended: CuaSessionRecord = await ref.ask(EndSession(), timeout=ASK_TIMEOUT)
    return ended


async def mint_stream_ticket(
    platform: ComputerServices,
    session: CuaSessionRecord,
    *,
    user_id: str | None,
    api_key_id: str | None,
    scopes: frozenset[str] | None,
) -> str:
    """A single-use ticket, valid for an hour, that opens only this session's events."""
    return await tickets.mint_ticket(
        platform.db,
        tenant_id=session.tenant_id,
        user_id=user_id,
        api_key_id=api_key_id,
        scopes=scopes,
        ttl_seconds=TICKET_TTL,
        purpose=ticket_purpose(session.id),
    )
