"""CUA sessions (contract §10): a computer-use agent driving one computer's desktop.

Modules: `store` (the session rows), `actor` (the session's state table, its
`cua.*` events), `actions` (the action bodies, run through desktop control) and
`sessions` (the operations the API calls).
"""

from __future__ import annotations

from . import store
from .actions import ACTIONS, MAX_WAIT_SECONDS, CuaAction, Outcome, parse_action, run_action
from .actor import (
    ACTION_EVENT,
    ENDED_EVENT,
    EVENT_TYPES,
    RESOURCE_TYPE,
    SCREENSHOT_EVENT,
    CuaSessionActor,
    EndSession,
    GetSession,
    RecordAction,
    session_ended,
    session_not_found,
)
from .sessions import (
    TICKET_TTL,
    NewSession,
    create_session,
    end_session,
    find_session,
    list_sessions,
    mint_stream_ticket,
    perform_action,
    session_public,
    ticket_purpose,
)
from .store import CuaSessionRecord

__all__ = [
    "ACTIONS",
    "ACTION_EVENT",
    "ENDED_EVENT",
    "EVENT_TYPES",
    "MAX_WAIT_SECONDS",
    "RESOURCE_TYPE",
    "SCREENSHOT_EVENT",
    "TICKET_TTL",
    "CuaAction",
    "CuaSessionActor",
    "CuaSessionRecord",
    "EndSession",
    "GetSession",
    "NewSession",
    "Outcome",
    "RecordAction",
    "create_session",
    "end_session",
    "find_session",
    "list_sessions",
    "mint_stream_ticket",
    "parse_action",
    "perform_action",
    "run_action",
    "session_ended",
    "session_not_found",
    "session_public",
    "store",
    "ticket_purpose",
]
