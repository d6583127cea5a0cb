"""CUA actions: one request body, `{action, ...}`, run through desktop control.

Each action takes the fields of the desktop route it stands for and runs that
route's function (`corral.actors.computers.desktop`), so its validation, its `409
COMPUTER_NOT_RUNNING` and its `422`s are the desktop's own. `double_click` is a
click with `double: true`; `wait` sleeps `seconds` (0 to 30) and touches nothing (it too needs `running`).

A request that is refused (400, 404, 409, 422) is not an action: nothing ran, so
nothing is recorded. An action the desktop could not carry out (a 5xx: the X tool
failed, the agent did not answer) did run: it is answered and recorded with `ok:
false` and `result: {error: {code, message}}`.
"""

from __future__ import annotations

import base64
import dataclasses
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import trio

from corral.actors.runtime_errors import RUNTIME_ERRORS, api_error_for
from corral.errors import ApiError, validation_error
from corral.ids import prefixed
from corral.models import Rule, model, parse

from .. import desktop
from ..actor import not_running
from ..store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

ACTIONS = ("screenshot", "click", "double_click", "move", "drag", "scroll", "type", "key", "wait")
MAX_WAIT_SECONDS = 30
REGION_FIELDS = ("x", "y", "width", "height")

ActionName = Literal["screenshot", "click", "double_click", "move", "drag", "scroll", "type", "key", "wait"]


@model
class CuaAction:
    """An action and its fields: screenshot {x?, y?, width?, height?}, click and
    double_click {x, y, button}, move {x, y}, drag {from_x, from_y, to_x, to_y, button},
    scroll {direction, amount, x?, y?}, type {text, delay_ms}, key {keys}, wait {seconds}."""

    action: Annotated[ActionName, Rule(description="what to do; the other fields are that desktop route's")]


@model
class Screenshot:
    """The whole screen, or the region x, y, width, height when all four are given."""

    x: Annotated[int | None, Rule(minimum=0)] = None
    y: Annotated[int | None, Rule(minimum=0)] = None
    width: Annotated[int | None, Rule(minimum=1)] = None
    height: Annotated[int | None, Rule(minimum=1)] = None

    def box(self) -> tuple[int, int, int, int] | None:
        values = (self.x, self.y, self.width, self.height)
        given = [v for v in values if v is not None]
        if not given:
            return None
        if len(given) != len(values):
            missing = [name for name, v in zip(REGION_FIELDS, values, strict=True) if v is None]
            raise validation_error({name: "is required for a region (give x, y, width and height, or none)" for name in missing})
        x, y, width, height = given
        return x, y, width, height


@model
class Wait:
    seconds: Annotated[float, Rule(minimum=0, maximum=MAX_WAIT_SECONDS, message=f"must be a number of seconds from 0 to {MAX_WAIT_SECONDS}")]


@dataclass(frozen=True)
class Outcome:
    """What an action did: what the API answers and what `cua.action` records."""

    action_id: str
    action: str
    params: dict[str, Any]
    ok: bool
    duration_ms: int
    result: dict[str, Any]
    screen: tuple[int, int] | None = None
    """A screenshot's width and height (for `cua.screenshot`)."""

    def public(self) -> dict[str, Any]:
        return {"action_id": self.action_id, "action": self.action, "ok": self.ok, "duration_ms": self.duration_ms, "result": self.result}


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the first, right after the signature)."""
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


Runner = Callable[["ComputerServices", ComputerRecord, Any], Awaitable[dict[str, Any]]]


async def _screenshot(platform: ComputerServices, row: ComputerRecord, request: Screenshot) -> dict[str, Any]:
    image = await desktop.screenshot(platform, row, request.box())
    width, height = png_size(image)
    return {"image_base64": base64.b64encode(image).decode("ascii"), "width": width, "height": height}


async def _double_click(platform: ComputerServices, row: ComputerRecord, request: desktop.Click) -> dict[str, Any]:
    return await desktop.click(platform, row, dataclasses.replace(request, double=True))


async def _wait(platform: ComputerServices, row: ComputerRecord, request: Wait) -> dict[str, Any]:
    """Sleep on the control plane; like every action it needs the computer running."""
    if row.status != "running":
        raise not_running()
    await trio.sleep(request.seconds)
    return {"seconds": request.seconds}


RUNNERS: dict[str, tuple[type, Runner]] = {
    "screenshot": (Screenshot, _screenshot),
    "click": (desktop.Click, desktop.click),
    "double_click": (desktop.Click, _double_click),
    "move": (desktop.Point, desktop.move),
    "drag": (desktop.Drag, desktop.drag),
    "scroll": (desktop.Scroll, desktop.scroll),
    "type": (desktop.TypeText, desktop.type_text),
    "key": (desktop.KeyPress, desktop.key),
    "wait": (Wait, _wait),
}
"""Per action: the request model of its fields and the function that does it."""


def parse_action(body: dict[str, Any]) -> tuple[str, Any]:
    """The action's name and its fields as the desktop route's model (its 400 and 422)."""
    action = parse(CuaAction, body).action
    request_model, _ = RUNNERS[action]
    return action, parse(request_model, {k: v for k, v in body.items() if k != "action"})


async def run_action(platform: ComputerServices, row: ComputerRecord, action: str, request: Any) -> Outcome:
    """Do the action on the computer's desktop and say how it went (see the module's
    docstring for which failures are `ok: false` and which are errors)."""
    _, runner = RUNNERS[action]
    params = dataclasses.asdict(request)
    if action == "double_click":
        params["double"] = True
    action_id = prefixed("act")
    started = time.monotonic()
    try:
        result = await runner(platform, row, request)
        ok = True
    except ApiError as error:
        if error.status < 500:
            raise
        ok, result = False, {"error": {"code": error.code, "message": error.message}}
    except RUNTIME_ERRORS as error:
        failure = api_error_for(error)
        if failure.status < 500:
            raise failure from error
        ok, result = False, {"error": {"code": failure.code, "message": failure.message}}
    duration_ms = round((time.monotonic() - started) * 1000)
    screen = (result["width"], result["height"]) if ok and action == "screenshot" else None
    return Outcome(action_id, action, params, ok, duration_ms, result, screen)
