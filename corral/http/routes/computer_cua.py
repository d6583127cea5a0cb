"""CUA sessions of a computer (contract §10), wrapped `{data: ...}`, under
`/computers/{id}/cua/sessions`.

Sessions, actions run through desktop control, end, a single-use SSE ticket for one
session's stream, and the stream itself (replayed from the session's start, closed
after `cua.ended`). The work is `corral.actors.computers.cua`'s.
"""

from __future__ import annotations

from quart import Response

from corral.actors.computers import ComputerRecord, cua
from corral.storage import Event

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router
from ..sse import event_stream
from .computers import READ, WRITE, computer_row

router = Router("computers")

BASE = "/computers/{id}/cua/sessions"
ENDED_LINGER = 2.0
"""Seconds the stream of an already ended session waits for its `cua.ended` when the
replay did not hold it (it may still be on its way to the log)."""


async def _session(ctx: RequestContext, id: str, session_id: str, *, change: bool = False) -> tuple[ComputerRecord, cua.CuaSessionRecord]:
    row = await computer_row(ctx, id, change=change)
    return row, await cua.find_session(ctx.platform, row, session_id)


@router.post(f"{BASE}", summary="Start a CUA session: {task?, metadata?}", scope=WRITE, action="computers.cua.create", status=201, request=cua.NewSession)
async def create(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    session = await cua.create_session(ctx.platform, row, await ctx.body(cua.NewSession))
    return data(cua.session_public(session), 201)


@router.get(f"{BASE}", summary="The computer's CUA sessions, newest first", scope=READ)
async def list_(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return data([cua.session_public(session) for session in await cua.list_sessions(ctx.platform, row)])


@router.get(f"{BASE}/{{session_id}}", summary="One CUA session", scope=READ)
async def get(ctx: RequestContext, id: str, session_id: str) -> Reply:
    _, session = await _session(ctx, id, session_id)
    return data(cua.session_public(session))


@router.post(
    f"{BASE}/{{session_id}}/actions",
    summary="Run an action on the desktop (screenshot, click, double_click, move, drag, scroll, type, key, wait)",
    scope=WRITE,
    action="computers.cua.action",
    request=cua.CuaAction,
)
async def act(ctx: RequestContext, id: str, session_id: str) -> Reply:
    row, session = await _session(ctx, id, session_id, change=True)
    await ctx.body(cua.CuaAction)  # the route's declared model: `action` itself
    outcome = await cua.perform_action(ctx.platform, row, session, await ctx.json())
    return data(outcome.public())


@router.post(f"{BASE}/{{session_id}}/end", summary="End the session (status ended; cua.ended closes its streams)", scope=WRITE, action="computers.cua.end")
async def end(ctx: RequestContext, id: str, session_id: str) -> Reply:
    _, session = await _session(ctx, id, session_id, change=True)
    return data(cua.session_public(await cua.end_session(ctx.platform, session)))


@router.post(
    f"{BASE}/{{session_id}}/sse-ticket",
    summary="A single-use ticket (valid 3600 s) that opens this session's event stream and nothing else",
    scope=READ,
    action="computers.cua.sse_ticket",
)
async def sse_ticket(ctx: RequestContext, id: str, session_id: str) -> Reply:
    _, session = await _session(ctx, id, session_id)
    principal = ctx.principal
    ticket = await cua.mint_stream_ticket(
        ctx.platform, session, user_id=principal.user_id, api_key_id=principal.api_key_id, scopes=principal.scopes
    )
    return Reply({"ticket": ticket, "expires_in": cua.TICKET_TTL, "session_id": session.id})


@router.get(
    f"{BASE}/{{session_id}}/events",
    summary="SSE: the session's cua.action, cua.screenshot and cua.ended from its start (or after Last-Event-ID), then live; closes after cua.ended",
    scope=READ,
    auth="ticket",
    ticket_purpose=cua.ticket_purpose("{session_id}"),
    content_type="text/event-stream",
)
async def events(ctx: RequestContext, id: str, session_id: str) -> Response:
    row, session = await _session(ctx, id, session_id)

    def computer_deleted(event: Event) -> bool:
        return event.type == "computer.deleted" and event.resource_type == "computer" and event.resource_id == row.id

    return event_stream(
        ctx,
        resource_type=cua.RESOURCE_TYPE,
        resource_id=session.id,
        types=cua.EVENT_TYPES,
        from_start=True,
        final_types=(cua.ENDED_EVENT,),
        ends_when=computer_deleted,
        live_for=ENDED_LINGER if session.status == "ended" else None,
    )
