"""Desktop control of a computer (contract §10), unwrapped, under `/computers/{id}/desktop`.

Every route needs `running` (`409 COMPUTER_NOT_RUNNING`); coordinates outside the
screen are `422 VALIDATION_ERROR`. The work is `corral.actors.computers.desktop`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import Response

from corral.actors import computers
from corral.actors.computers import desktop
from corral.actors.computers.services import ComputerServices
from corral.errors import validation_error

from ..context import RequestContext
from ..replies import Reply, raw
from ..routing import Router
from .computers import READ, WRITE, computer_row

router = Router("computers")

BASE = "/computers/{id}/desktop"
REGION_QUERY = ("x", "y", "width", "height")


def png(data: bytes) -> Response:
    return Response(data, status=200, content_type="image/png", headers={"Cache-Control": "no-store"})


def region(ctx: RequestContext) -> tuple[int, int, int, int]:
    """The four required integers of a region screenshot; 422 naming each one that is not."""
    values: dict[str, int] = {}
    problems = {}
    for name in REGION_QUERY:
        text = ctx.query(name)
        if text is None or text == "":
            problems[name] = "is required"
        elif not text.isdigit():
            problems[name] = "must be an integer from 0"
        else:
            values[name] = int(text)
    if problems:
        raise validation_error(problems)
    return values["x"], values["y"], values["width"], values["height"]


@router.get(f"{BASE}/screenshot", summary="A PNG of the whole screen", scope=READ, content_type="image/png")
async def screenshot(ctx: RequestContext, id: str) -> Response:
    row = await computer_row(ctx, id)
    return png(await desktop.screenshot(ctx.platform, row))


@router.get(
    f"{BASE}/screenshot/region",
    summary="A PNG of one rectangle of the screen",
    scope=READ,
    content_type="image/png",
    query={name: "integer, required (screen pixels)" for name in REGION_QUERY},
)
async def screenshot_region(ctx: RequestContext, id: str) -> Response:
    row = await computer_row(ctx, id)
    box = region(ctx)
    return png(await desktop.screenshot(ctx.platform, row, box))


@router.get(f"{BASE}/screen", summary="The screen's size: {width, height}", scope=READ)
async def screen(ctx: RequestContext, id: str) -> Reply:
    return raw(await desktop.screen(ctx.platform, await computer_row(ctx, id)))


@router.get(f"{BASE}/cursor", summary="Where the pointer is: {x, y}", scope=READ)
async def cursor(ctx: RequestContext, id: str) -> Reply:
    return raw(await desktop.cursor(ctx.platform, await computer_row(ctx, id)))


Action = Callable[[ComputerServices, computers.ComputerRecord, Any], Awaitable[dict[str, Any]]]

INPUT_ACTIONS: list[tuple[str, str, str, type, Action]] = [
    ("/mouse/move", "Move the pointer", "move", desktop.Point, desktop.move),
    ("/mouse/click", "Click (or double-click) a button at a point", "click", desktop.Click, desktop.click),
    ("/mouse/drag", "Press at one point, move to another, release", "drag", desktop.Drag, desktop.drag),
    ("/mouse/scroll", "Turn the wheel (amount 1-100, default 3)", "scroll", desktop.Scroll, desktop.scroll),
    (
        "/keyboard/type",
        "Type text into the focused window (1-10,000 characters, delay_ms 0-1000, default 12)",
        "type",
        desktop.TypeText,
        desktop.type_text,
    ),
    ("/keyboard/key", "Press a key or chord of X keysym names (Return, ctrl+l, alt+F4)", "key", desktop.KeyPress, desktop.key),
]
"""The mouse and keyboard: each a body model and the desktop function that acts on it."""


def _input_route(path: str, summary: str, action: str, model: type, act: Action) -> None:
    @router.post(f"{BASE}{path}", summary=summary, scope=WRITE, action=f"computers.desktop.{action}", request=model)
    async def handler(ctx: RequestContext, id: str) -> Reply:
        row = await computer_row(ctx, id, change=True)
        return raw(await act(ctx.platform, row, await ctx.body(model)))

    handler.__name__ = f"desktop_{action}"


for _route in INPUT_ACTIONS:
    _input_route(*_route)


@router.get(f"{BASE}/windows", summary="Top-level windows: {windows: [{id, title, x, y, width, height, focused, state}]}", scope=READ)
async def windows(ctx: RequestContext, id: str) -> Reply:
    return raw(await desktop.windows(ctx.platform, await computer_row(ctx, id)))


@router.post(
    f"{BASE}/windows/{{window_id}}/state",
    summary="Focus, restore, minimize, maximize or close a window",
    scope=WRITE,
    action="computers.desktop.window",
    request=desktop.WindowStateChange,
)
async def window_state(ctx: RequestContext, id: str, window_id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    change = await ctx.body(desktop.WindowStateChange)
    return raw(await desktop.set_window_state(ctx.platform, row, window_id, change))


