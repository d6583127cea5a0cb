"""Desktop control (contract §10): screenshots, the mouse, the keyboard and windows.

The pointer, the buttons and the screen go through the guest agent's persistent
connection to the X server (`corral.vm.agent.xdisplay`: XTEST input and GetImage,
no process per action, a click in about the time of the X round trip). The
keyboard and windows run the X tools made for them inside the computer, through
the agent like exec (`xdotool` knows every keysym name and maps characters the
keyboard lacks; `wmctrl`, `xprop` and `xwininfo` speak the window manager's
hints): one short process per action, about 10 ms. An agent that has no X
connection to offer (one started before it had, or a display it cannot speak to)
gets the same actions as X tool processes (`xdotool`, `xwd`), as before.
Nothing of the desktop's own is kept on the control plane. They need `running` (else
`409 COMPUTER_NOT_RUNNING`) and count as activity for auto-stop. Coordinates are
screen pixels from the top-left; one outside the screen (the computer's
`resolution`) is `422 VALIDATION_ERROR`.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import trio

from corral.errors import ApiError, validation_error
from corral.ids import new_ulid
from corral.models import NO_NUL, Rule, model
from corral.vm import AgentClient, AgentError, ExecResult, ProcessNotFound

from .desktop_session import DISPLAY
from .execution import activity, agent_for
from .records import MAX_RESOLUTION, parse_resolution
from .screenshots import BadDump, parse_xwd, png_size, to_png
from .store import ComputerRecord
from .templates import get_template

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

ACTION_TIMEOUT = 15.0
MAX_TYPE_SECONDS = 3600.0
"""The guest agent's longest command: text whose typing would take longer is refused."""
BUTTONS = {"left": 1, "middle": 2, "right": 3}
SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
WINDOW_STATES = ("focused", "normal", "minimized", "maximized", "closed")
DOUBLE_CLICK_GAP_MS = 60
DRAG_STEP_MS = 20
MAX_SCREEN_BYTES = MAX_RESOLUTION[0] * MAX_RESOLUTION[1] * 4
"""The most the host takes from an agent for one screenshot (a PNG of the largest
screen, incompressible, is about its raw size)."""
XWD_HEADER_ROOM = 1 << 16
"""An xwd dump is the screen's pixels after a header and a colour map: this much more."""
FALL_BACK = ("DISPLAY_UNAVAILABLE",)
"""The agent's codes for "no X connection here": the X tools are tried instead."""

Coordinate = Annotated[int, Rule(minimum=0, message="must be a screen coordinate (an integer from 0)")]
Button = Literal["left", "middle", "right"]


@model
class Point:
    x: Coordinate
    y: Coordinate


@model
class Click:
    x: Coordinate
    y: Coordinate
    button: Button = "left"
    double: bool = False


@model
class Drag:
    from_x: Coordinate
    from_y: Coordinate
    to_x: Coordinate
    to_y: Coordinate
    button: Button = "left"


@model
class Scroll:
    direction: Literal["up", "down", "left", "right"]
    amount: Annotated[int, Rule(minimum=1, maximum=100)] = 3
    x: Coordinate | None = None
    y: Coordinate | None = None


@model
class TypeText:
    text: Annotated[
        str,
        Rule(
            max_length=10_000, strip=False, allow_empty=True, pattern=NO_NUL,
            message="must be text of 1 to 10000 characters, without NUL",
        ),
    ]
    delay_ms: Annotated[int, Rule(minimum=0, maximum=1000)] = 12


@model
class KeyPress:
    keys: Annotated[
        str,
        Rule(
            max_length=200, pattern=NO_NUL, message="must be X keysym names joined by + (at most 200 characters)",
            description="X keysym names joined by +, e.g. Return, ctrl+l, alt+F4",
        ),
    ]


@model
class WindowStateChange:
    state: Literal["focused", "normal", "minimized", "maximized", "closed"]


@dataclass(frozen=True)
class Desktop:
    """One running desktop computer's agent and screen size, for the length of a request."""

    platform: ComputerServices
    row: ComputerRecord
    agent: AgentClient
    width: int
    height: int

    async def run(self, command: str, *, timeout: float = ACTION_TIMEOUT, env: dict[str, str] | None = None) -> ExecResult:
        """`command` on the desktop's display; its result (exit code and output)."""
        with activity(self.platform).busy(self.row.id):
            return await self.agent.exec(
                command, timeout=timeout, cwd="/", env={"DISPLAY": DISPLAY, **(env or {})}
            )

    async def check(self, command: str, *, timeout: float = ACTION_TIMEOUT, env: dict[str, str] | None = None) -> str:
        """`run`, with a failure as `500 DESKTOP_ERROR` carrying the tool's own words."""
        result = await self.run(command, timeout=timeout, env=env)
        if result.exit_code != 0:
            detail = (result.stderr or result.stdout).strip()[:500] or f"exit code {result.exit_code}"
            raise ApiError(500, "DESKTOP_ERROR", f"the desktop did not do it: {detail}")
        return result.stdout

    async def input(self, steps: list[dict[str, Any]]) -> tuple[int, int] | None:
        """Run `steps` (see `corral.vm.agent.xdisplay`) over the agent's X connection;
        where the pointer is afterwards, or None when the agent has no X connection to
        offer (the caller then runs the X tools)."""
        sleeps = sum(int(step.get("sleep_ms", 0)) for step in steps) / 1000
        with activity(self.platform).busy(self.row.id):
            try:
                answer = await self.agent.desktop_input(DISPLAY, steps, timeout=ACTION_TIMEOUT + sleeps)
            except ProcessNotFound:  # an agent older than its desktop routes: 404 NOT_FOUND
                return None
            except AgentError as exc:
                if exc.code in FALL_BACK:
                    return None
                raise ApiError(500, "DESKTOP_ERROR", f"the desktop did not do it: {str(exc)[:500]}") from exc
        x, y = answer.get("x"), answer.get("y")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (x, y)):
            raise ApiError(500, "DESKTOP_ERROR", "the desktop answered something that is not a point")
        return x, y  # type: ignore[return-value]

    async def capture(self, box: tuple[int, int, int, int] | None) -> bytes | None:
        """The agent's PNG of the screen (or `box`) from its X connection; None when the
        agent has no X connection to offer. What it sends is taken only as a PNG of the
        size asked for (of at most the largest screen without a box), within a size limit."""
        limit = (box[2] * box[3] * 4 + 4096) if box is not None else MAX_SCREEN_BYTES
        with activity(self.platform).busy(self.row.id):
            try:
                png = await self.agent.desktop_screen(DISPLAY, box, limit, timeout=ACTION_TIMEOUT)
            except ProcessNotFound:
                return None
            except AgentError as exc:
                if exc.code in FALL_BACK:
                    return None
                raise ApiError(500, "DESKTOP_ERROR", f"the screen could not be read: {str(exc)[:500]}") from exc
        try:
            width, height = png_size(png)
            if (width, height) != (box[2:] if box is not None else (width, height)) or not (
                0 < width <= MAX_RESOLUTION[0] and 0 < height <= MAX_RESOLUTION[1]
            ):
                raise BadDump(f"a {width}x{height} screenshot is not what was asked for")
        except BadDump as exc:
            raise ApiError(500, "DESKTOP_ERROR", f"the screen could not be read: {exc}") from exc
        return png

    def require_on_screen(self, **points: int | None) -> None:
        """422 naming every coordinate outside the screen (x against the width, y the height)."""
        problems = {}
        for name, value in points.items():
            if value is None:
                continue
            limit = self.width if name.endswith("x") else self.height
            if value >= limit:
                problems[name] = f"must be within the screen (0 to {limit - 1})"
        if problems:
            raise validation_error(problems)


    def require_region(self, x: int, y: int, width: int, height: int) -> None:
        """422 unless the rectangle is at least a pixel and lies on the screen."""
        self.require_on_screen(x=x, y=y)
        problems = {}
        for name, size, start, limit in (("width", width, x, self.width), ("height", height, y, self.height)):
            if size < 1:
                problems[name] = "must be at least 1"
            elif start + size > limit:
                problems[name] = f"must end within the screen (at most {limit - start} from here)"
        if problems:
            raise validation_error(problems)


async def desktop_of(platform: ComputerServices, row: ComputerRecord) -> Desktop:
    """The desktop of a running computer (`409 COMPUTER_NOT_RUNNING` otherwise)."""
    template = get_template(row.template_type)
    if template is None or not template.desktop:
        raise ApiError(409, "INVALID_STATE", "this computer's template has no desktop")
    agent = await agent_for(platform, row)
    width, height = parse_resolution(row.resolution)
    return Desktop(platform, row, agent, width, height)


# -- the screen ------------------------------------------------------------------------


async def screen(platform: ComputerServices, row: ComputerRecord) -> dict[str, int]:
    desktop = await desktop_of(platform, row)
    return {"width": desktop.width, "height": desktop.height}


async def screenshot(platform: ComputerServices, row: ComputerRecord, box: tuple[int, int, int, int] | None = None) -> bytes:
    """A PNG of the screen (or of `box` = x, y, width, height): from the agent's X
    connection, else dumped with `xwd`."""
    desktop = await desktop_of(platform, row)
    if box is not None:
        desktop.require_region(*box)
    captured = await desktop.capture(box)
    if captured is not None:
        return captured
    path = f"/tmp/.corral-screen-{new_ulid()}.xwd"
    try:
        await desktop.check(f"xwd -root -silent -out {path}")
        dump = (await desktop.agent.read_file(path, timeout=ACTION_TIMEOUT, max_bytes=MAX_SCREEN_BYTES + XWD_HEADER_ROOM)).data
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await desktop.run(f"rm -f {path}")
    try:
        return await trio.to_thread.run_sync(lambda: to_png(parse_xwd(dump), box))
    except BadDump as exc:
        raise ApiError(500, "DESKTOP_ERROR", f"the screen could not be read: {exc}") from exc


# -- the mouse -------------------------------------------------------------------------


async def cursor(platform: ComputerServices, row: ComputerRecord) -> dict[str, int]:
    desktop = await desktop_of(platform, row)
    where = await desktop.input([])
    if where is not None:
        return {"x": where[0], "y": where[1]}
    out = await desktop.check("xdotool getmouselocation --shell")
    values = dict(line.split("=", 1) for line in out.split() if "=" in line)
    return {"x": int(values["X"]), "y": int(values["Y"])}


async def move(platform: ComputerServices, row: ComputerRecord, point: Point) -> dict[str, int]:
    desktop = await desktop_of(platform, row)
    desktop.require_on_screen(x=point.x, y=point.y)
    if await desktop.input([{"move": [point.x, point.y]}]) is None:
        await desktop.check(f"xdotool mousemove {point.x} {point.y}")
    return {"x": point.x, "y": point.y}


async def click(platform: ComputerServices, row: ComputerRecord, request: Click) -> dict[str, Any]:
    desktop = await desktop_of(platform, row)
    desktop.require_on_screen(x=request.x, y=request.y)
    # xdotool waits `--delay` after every click, the last one too: none for a single click.
    repeat, gap = (2, DOUBLE_CLICK_GAP_MS) if request.double else (1, 0)
    button = BUTTONS[request.button]
    press: list[dict[str, Any]] = [{"button": button, "down": True}, {"button": button, "down": False}]
    steps: list[dict[str, Any]] = [{"move": [request.x, request.y]}, *press, *([{"sleep_ms": gap}, *press] if request.double else [])]
    if await desktop.input(steps) is None:
        await desktop.check(f"xdotool mousemove {request.x} {request.y} click --repeat {repeat} --delay {gap} {button}")
    return {"x": request.x, "y": request.y, "button": request.button}


async def drag(platform: ComputerServices, row: ComputerRecord, request: Drag) -> dict[str, int]:
    """Press at the start, move through the middle to the end, release (apps see motion)."""
    desktop = await desktop_of(platform, row)
    desktop.require_on_screen(from_x=request.from_x, from_y=request.from_y, to_x=request.to_x, to_y=request.to_y)
    button = BUTTONS[request.button]
    mid_x, mid_y = (request.from_x + request.to_x) // 2, (request.from_y + request.to_y) // 2
    steps: list[dict[str, Any]] = [
        {"move": [request.from_x, request.from_y]}, {"button": button, "down": True}, {"sleep_ms": DRAG_STEP_MS},
        {"move": [mid_x, mid_y]}, {"sleep_ms": DRAG_STEP_MS},
        {"move": [request.to_x, request.to_y]}, {"button": button, "down": False},
    ]
    if await desktop.input(steps) is not None:
        return {"x": request.to_x, "y": request.to_y}
    await desktop.check(
        f"xdotool mousemove {request.from_x} {request.from_y} mousedown {button} "
        f"sleep 0.02 mousemove {mid_x} {mid_y} sleep 0.02 "
        f"mousemove {request.to_x} {request.to_y} mouseup {button}"
    )
    return {"x": request.to_x, "y": request.to_y}


async def scroll(platform: ComputerServices, row: ComputerRecord, request: Scroll) -> dict[str, Any]:
    """`amount` wheel clicks, where the pointer is or at (x, y) when both are given."""
    if (request.x is None) != (request.y is None):
        raise validation_error({"x" if request.x is None else "y": "give both x and y, or neither"})
    desktop = await desktop_of(platform, row)
    desktop.require_on_screen(x=request.x, y=request.y)
    wheel = SCROLL_BUTTONS[request.direction]
    steps: list[dict[str, Any]] = [{"move": [request.x, request.y]}] if request.x is not None else []
    steps += [{"button": wheel, "down": down} for _ in range(request.amount) for down in (True, False)]
    if await desktop.input(steps) is not None:
        return {"direction": request.direction, "amount": request.amount}
    move_first = f"mousemove {request.x} {request.y} " if request.x is not None else ""
    await desktop.check(f"xdotool {move_first}click --repeat {request.amount} --delay 0 {SCROLL_BUTTONS[request.direction]}")
    return {"direction": request.direction, "amount": request.amount}


# -- the keyboard ----------------------------------------------------------------------


REMAPPED_GAP_MS = 80
"""The least gap after a character xdotool must map to a spare keycode first (one the
keyboard map lacks, such as `ö`): it binds the keycode, presses it, waits the delay and
unbinds it, and a window that reads the key after the unbind sees no symbol."""


def typing_runs(text: str, delay_ms: int) -> list[tuple[str, int]]:
    """`text` in runs of (characters, delay): the keyboard's own characters at `delay_ms`,
    the others at no less than `REMAPPED_GAP_MS`."""
    runs: list[tuple[str, int]] = []
    for char in text:
        delay = delay_ms if char.isascii() else max(delay_ms, REMAPPED_GAP_MS)
        if runs and runs[-1][1] == delay:
            runs[-1] = (runs[-1][0] + char, delay)
        else:
            runs.append((char, delay))
    return runs


async def type_text(platform: ComputerServices, row: ComputerRecord, request: TypeText) -> dict[str, int]:
    """The text into the focused window, `delay_ms` between characters.

    The text reaches xdotool through the environment, never through a shell's quoting."""
    if not request.text:
        raise validation_error({"text": "must be text of 1 to 10000 characters"})
    runs = typing_runs(request.text, request.delay_ms)
    typing_seconds = sum(len(chars) * delay for chars, delay in runs) / 1000
    if typing_seconds > MAX_TYPE_SECONDS:
        raise validation_error({"delay_ms": f"{len(request.text)} characters at this delay take longer than {MAX_TYPE_SECONDS:.0f} s"})
    desktop = await desktop_of(platform, row)
    command = " && ".join(f'xdotool type --delay {delay} -- "$CORRAL_TEXT_{i}"' for i, (_, delay) in enumerate(runs))
    await desktop.check(
        command,
        timeout=ACTION_TIMEOUT + typing_seconds * 1.5,
        env={f"CORRAL_TEXT_{i}": chars for i, (chars, _) in enumerate(runs)},
    )
    return {"characters": len(request.text)}


MODIFIERS = {"ctrl", "control", "alt", "shift", "super", "meta", "cmd", "win"}
MODIFIER_KEYSYMS = {"cmd": "super", "win": "super"}


def key_chord(keys: str) -> str:
    """`ctrl+l` as xdotool's chord; 422 for a malformed one (names are checked by xdotool)."""
    parts = keys.split("+")
    if not keys or any(not part or part != part.strip() or not part.isprintable() for part in parts):
        raise validation_error({"keys": "must be X keysym names joined by +, e.g. Return, ctrl+l, alt+F4"})
    return "+".join(MODIFIER_KEYSYMS.get(part.lower(), part) for part in parts)


async def key(platform: ComputerServices, row: ComputerRecord, request: KeyPress) -> dict[str, str]:
    chord = key_chord(request.keys)
    desktop = await desktop_of(platform, row)
    result = await desktop.run(f"xdotool key --clearmodifiers --delay 0 -- {shlex.quote(chord)}")
    if "No such key name" in result.stderr or "Invalid key sequence" in result.stderr:
        unknown = [part for part in chord.split("+") if f"'{part}'" in result.stderr] or [request.keys]
        raise validation_error({"keys": f"unknown key name {unknown[0]!r}"})
    if result.exit_code != 0:
        raise ApiError(500, "DESKTOP_ERROR", f"the desktop did not do it: {result.stderr.strip()[:500]}")
    return {"keys": request.keys}


# -- windows ---------------------------------------------------------------------------

LIST_WINDOWS = (
    'echo "active $(xdotool getactivewindow 2>/dev/null)"; '
    "wmctrl -l | while read -r id desk host title; do "
    "geometry=$(xwininfo -id $id | awk '/Absolute upper-left X/{x=$4} /Absolute upper-left Y/{y=$4} "
    "/Width:/{w=$2} /Height:/{h=$2} END{print x, y, w, h}'); "
    'echo "window $id $geometry $(xprop -id $id _NET_WM_STATE 2>/dev/null | tr -d " \\n")"; '
    'printf "%s\\n" "$title"; done'
)
"""Per window: its id, where its client area is (xwininfo: wmctrl's geometry counts
the frame twice under Openbox), its _NET_WM_STATE, and then its title on a line of its own."""


def window_id_text(value: int) -> str:
    return f"0x{value:08x}"


def parse_window_id(text: str) -> int | None:
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
    return value if 0 < value < 2**32 else None


def window_state(net_wm_state: str) -> str:
    if "_NET_WM_STATE_HIDDEN" in net_wm_state:
        return "minimized"
    if "_NET_WM_STATE_MAXIMIZED_VERT" in net_wm_state and "_NET_WM_STATE_MAXIMIZED_HORZ" in net_wm_state:
        return "maximized"
    return "normal"


def parse_windows(output: str) -> list[dict[str, Any]]:
    """The listing script's output: an `active` line, then per window a line of
    numbers and state and a line with its title (titles may hold any text)."""
    lines = output.split("\n")
    active_text = lines[0].removeprefix("active").strip() if lines else ""
    active = int(active_text) if active_text.isdigit() else None
    windows = []
    for header, title in zip(lines[1::2], lines[2::2], strict=False):
        fields = header.split(" ", 6)
        if len(fields) < 6 or fields[0] != "window":
            continue
        try:
            wid = int(fields[1], 16)
            x, y, width, height = (int(v) for v in fields[2:6])
        except ValueError:  # a window that went away while it was listed (no geometry left)
            continue
        windows.append(
            {
                "id": window_id_text(wid),
                "title": title,
                "x": x,
                "y": y,
                "width": width,
                "height": height,
                "focused": wid == active,
                "state": window_state(fields[6] if len(fields) > 6 else ""),
            }
        )
    return windows


async def _windows(desktop: Desktop) -> list[dict[str, Any]]:
    return parse_windows(await desktop.check(LIST_WINDOWS))


async def windows(platform: ComputerServices, row: ComputerRecord) -> dict[str, Any]:
    return {"windows": await _windows(await desktop_of(platform, row))}


def window_not_found(window_id: str) -> ApiError:
    return ApiError(404, "WINDOW_NOT_FOUND", f"window not found: {window_id}")


STATE_COMMANDS = {
    "focused": "wmctrl -i -a {id}",
    "normal": "xdotool windowmap {id}; wmctrl -i -r {id} -b remove,maximized_vert,maximized_horz",
    "minimized": "xdotool windowminimize {id}",
    "maximized": "xdotool windowmap {id}; wmctrl -i -r {id} -b add,maximized_vert,maximized_horz",
    "closed": "wmctrl -i -c {id}",
}


async def set_window_state(
    platform: ComputerServices, row: ComputerRecord, window_id: str, change: WindowStateChange
) -> dict[str, Any]:
    """Focus, restore, minimize, maximize or close a window; the window afterwards
    (for `closed`, as it was)."""
    wid = parse_window_id(window_id)
    desktop = await desktop_of(platform, row)
    before = next((w for w in await _windows(desktop) if wid is not None and int(w["id"], 16) == wid), None)
    if before is None or wid is None:
        raise window_not_found(window_id)
    await desktop.check(STATE_COMMANDS[change.state].format(id=window_id_text(wid)))
    if change.state == "closed":
        return {"window": before}
    window = await _settled(desktop, wid, change.state)
    return {"window": window or before}


async def _settled(desktop: Desktop, wid: int, wanted: str, timeout: float = 1.0) -> dict[str, Any] | None:
    """The window once the window manager shows the change (it applies it asynchronously)."""
    deadline = time.monotonic() + timeout
    window = None
    while True:
        window = next((w for w in await _windows(desktop) if int(w["id"], 16) == wid), None)
        done = window is not None and (window["focused"] if wanted == "focused" else window["state"] == wanted)
        if done or time.monotonic() > deadline:
            return window
        await trio.sleep(0.02)

