"""Desktop control through HTTP (contract §10) on a real X server in a real computer."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from PIL import Image

from corral.actors.computers.desktop import REMAPPED_GAP_MS, typing_runs
from tests.http.computer_support import call, create_running, run, wait_for, windows
from tests.support import Api, Tenant, assert_error

D = "/desktop"


@pytest.fixture
async def desk(runtime_api: Api, owner: Tenant) -> AsyncIterator[tuple[Api, Tenant, dict[str, Any]]]:
    """A running desktop computer at 800x600."""
    computer = await create_running(runtime_api, owner, resolution="800x600")
    yield runtime_api, owner, computer


async def post(api: Api, tenant: Tenant, cid: str, path: str, **body: Any) -> Any:
    return await call(api, tenant, "POST", cid, D + path, json=body)


async def wait_for_window(api: Api, tenant: Tenant, cid: str, title: str) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []
    with trio.move_on_after(15):
        while True:
            seen = await windows(api, tenant, cid)
            found = [w for w in seen if w["title"] == title]
            if found:
                return found[0]
            await trio.sleep(0.05)
    ps = (await run(api, tenant, cid, "ps -eo pid,lstart,args; cat /tmp/window.log; xwininfo -root -tree | grep -i -B2 event; xprop -root _NET_CLIENT_LIST _NET_SUPPORTING_WM_CHECK"))["output"]
    raise AssertionError(f"no window {title!r}: windows {seen}, processes:\n{ps}")


async def open_xterm(api: Api, tenant: Tenant, cid: str, title: str, command: str) -> dict[str, Any]:
    """An xterm titled `title` running `command`, once it is mapped, focused through the API."""
    await run(api, tenant, cid, f"nohup xterm -T {title} -geometry 60x10+40+40 -e sh -c '{command}' >/tmp/window.log 2>&1 &")
    found = await wait_for_window(api, tenant, cid, title)
    focused = await post(api, tenant, cid, f"/windows/{found['id']}/state", state="focused")
    assert focused.status_code == 200 and focused.json()["window"]["focused"], focused.text
    window: dict[str, Any] = focused.json()["window"]
    return window


def png_size(data: bytes) -> tuple[int, int]:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    return image.size


async def test_a_screenshot_is_a_png_of_the_whole_screen(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    response = await call(api, tenant, "GET", computer["id"], D + "/screenshot")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert png_size(response.content) == (800, 600)
    screen = await call(api, tenant, "GET", computer["id"], D + "/screen")
    assert screen.json() == {"width": 800, "height": 600}


async def test_a_screenshot_shows_what_is_on_the_screen(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    # A window filled with one colour, placed where we look for it.
    window = await open_xterm(api, tenant, cid, "colour-probe", "sleep 60")
    await run(api, tenant, cid, f"xdotool windowmove {int(window['id'], 16)} 300 300 && sleep 0.2")
    await run(api, tenant, cid, "xsetroot -solid '#ff0000'")
    region = await call(api, tenant, "GET", cid, D + "/screenshot/region", params={"x": 0, "y": 580, "width": 20, "height": 20})
    assert region.status_code == 200 and png_size(region.content) == (20, 20)
    colours = Image.open(io.BytesIO(region.content)).convert("RGB").getcolors()
    assert colours == [(400, (255, 0, 0))]  # the root window's colour, exactly
    await post(api, tenant, cid, f"/windows/{window['id']}/state", state="closed")


async def test_region_errors(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk

    async def region(**params: Any) -> Any:
        return await call(api, tenant, "GET", computer["id"], D + "/screenshot/region", params=params)

    whole = await region(x=0, y=0, width=800, height=600)
    assert whole.status_code == 200 and png_size(whole.content) == (800, 600)
    assert assert_error(await region(x=0, y=0), 422, "VALIDATION_ERROR")["details"] == {"width": "is required", "height": "is required"}
    assert "x" in assert_error(await region(x="a", y=0, width=1, height=1), 422, "VALIDATION_ERROR")["details"]
    assert "width" in assert_error(await region(x=0, y=0, width=801, height=1), 422, "VALIDATION_ERROR")["details"]
    assert "height" in assert_error(await region(x=0, y=599, width=1, height=2), 422, "VALIDATION_ERROR")["details"]
    assert "width" in assert_error(await region(x=0, y=0, width=0, height=1), 422, "VALIDATION_ERROR")["details"]
    assert "x" in assert_error(await region(x=800, y=0, width=1, height=1), 422, "VALIDATION_ERROR")["details"]


async def test_mouse_move_and_cursor(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    moved = await post(api, tenant, cid, "/mouse/move", x=123, y=456)
    assert moved.status_code == 200 and moved.json() == {"x": 123, "y": 456}
    assert (await call(api, tenant, "GET", cid, D + "/cursor")).json() == {"x": 123, "y": 456}
    corner = await post(api, tenant, cid, "/mouse/move", x=799, y=599)
    assert corner.json() == {"x": 799, "y": 599}
    assert_error(await post(api, tenant, cid, "/mouse/move", x=800, y=0), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/mouse/move", x=0, y=600), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/mouse/move", x=-1, y=0), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/mouse/move", x=1), 400, "MISSING_PARAM")


async def test_clicks_reach_the_application(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    """xev inside an xterm-free window reports the button presses the API makes."""
    api, tenant, computer = desk
    cid = computer["id"]
    await run(api, tenant, cid, "nohup xev -geometry 200x200+0+0 -event button > /tmp/xev.log 2>/tmp/window.log &")
    target = await wait_for_window(api, tenant, cid, "Event Tester")
    x, y = target["x"] + 50, target["y"] + 50
    clicked = await post(api, tenant, cid, "/mouse/click", x=x, y=y, button="right")
    assert clicked.status_code == 200 and clicked.json() == {"x": x, "y": y, "button": "right"}
    double = await post(api, tenant, cid, "/mouse/click", x=x, y=y, double=True)
    assert double.json() == {"x": x, "y": y, "button": "left"}, double.text
    scrolled = await post(api, tenant, cid, "/mouse/scroll", x=x, y=y, direction="down", amount=2)
    assert scrolled.status_code == 200 and scrolled.json() == {"direction": "down", "amount": 2}
    await trio.sleep(0.3)
    log = (await run(api, tenant, cid, "grep -o 'ButtonPress.*' /tmp/xev.log | wc -l; grep -o 'button [0-9]' /tmp/xev.log | tr '\\n' ' '"))["output"]
    assert log.split("\n")[1].split("button ")[1:] == ["3 ", "3 ", "1 ", "1 ", "1 ", "1 ", "5 ", "5 ", "5 ", "5 "]
    await post(api, tenant, cid, f"/windows/{target['id']}/state", state="closed")


async def test_mouse_errors(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    assert_error(await post(api, tenant, cid, "/mouse/click", x=900, y=10), 422, "VALIDATION_ERROR")
    assert assert_error(await post(api, tenant, cid, "/mouse/click", x=1, y=1, button="side"), 422, "VALIDATION_ERROR")["details"] == {
        "button": "must be one of left, middle, right"
    }
    assert_error(await post(api, tenant, cid, "/mouse/drag", from_x=1, from_y=1, to_x=1, to_y=601), 422, "VALIDATION_ERROR")
    dragged = await post(api, tenant, cid, "/mouse/drag", from_x=1, from_y=1, to_x=30, to_y=40)
    assert dragged.status_code == 200 and dragged.json() == {"x": 30, "y": 40}
    assert_error(await post(api, tenant, cid, "/mouse/scroll", direction="sideways"), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/mouse/scroll", direction="up", amount=0), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/mouse/scroll", direction="up", amount=101), 422, "VALIDATION_ERROR")
    assert (await post(api, tenant, cid, "/mouse/scroll", direction="up", amount=100)).json() == {"direction": "up", "amount": 100}
    assert (await post(api, tenant, cid, "/mouse/scroll", direction="left")).json() == {"direction": "left", "amount": 3}
    half = await post(api, tenant, cid, "/mouse/scroll", direction="up", x=10)
    assert assert_error(half, 422, "VALIDATION_ERROR")["details"] == {"y": "give both x and y, or neither"}


async def test_typed_text_and_keys_land_in_the_focused_xterm_exactly(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    window = await open_xterm(api, tenant, cid, "typing-target", "cat > /tmp/typed.txt")
    text = "Hello, wörld! $HOME 'quotes' \"double\" `tick` \\ ; & | <> ~"
    typed = await post(api, tenant, cid, "/keyboard/type", text=text)
    assert typed.status_code == 200 and typed.json() == {"characters": len(text)}
    assert (await post(api, tenant, cid, "/keyboard/key", keys="Return")).json() == {"keys": "Return"}
    assert (await post(api, tenant, cid, "/keyboard/type", text="second line\n", delay_ms=0)).status_code == 200
    assert (await post(api, tenant, cid, "/keyboard/key", keys="ctrl+d")).json() == {"keys": "ctrl+d"}  # end of input: cat exits
    with trio.fail_after(10):
        while any(w["id"] == window["id"] for w in await windows(api, tenant, cid)):
            await trio.sleep(0.05)
    written = await run(api, tenant, cid, "cat /tmp/typed.txt")
    assert written["output"] == text + "\nsecond line\n"


async def test_the_longest_text(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    await open_xterm(api, tenant, cid, "long-text", "stty -icanon; head -c 10000 > /tmp/long.txt")
    text = ("abcdefghij" * 1000)[:10_000]
    with trio.fail_after(120):
        typed = await post(api, tenant, cid, "/keyboard/type", text=text, delay_ms=0)
    assert typed.status_code == 200 and typed.json() == {"characters": 10_000}
    with trio.fail_after(20):
        while (await run(api, tenant, cid, "wc -c < /tmp/long.txt"))["output"].strip() != "10000":
            await trio.sleep(0.2)
    assert (await run(api, tenant, cid, "md5sum < /tmp/long.txt"))["output"].split()[0] == (
        (await run(api, tenant, cid, f"printf '%s' {text} | md5sum"))["output"].split()[0]
    )


async def test_keyboard_errors(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    assert assert_error(await post(api, tenant, cid, "/keyboard/type", text=""), 422, "VALIDATION_ERROR")["details"] == {
        "text": "must be text of 1 to 10000 characters"
    }
    # X cannot type a NUL; before, it reached the agent as an environment variable (502).
    nul = await post(api, tenant, cid, "/keyboard/type", text="a\u0000b")
    assert assert_error(nul, 422, "VALIDATION_ERROR")["details"] == {"text": "must be text of 1 to 10000 characters, without NUL"}
    nul_key = await post(api, tenant, cid, "/keyboard/key", keys="ctrl+\u0000")
    assert assert_error(nul_key, 422, "VALIDATION_ERROR")["details"] == {"keys": "must be X keysym names joined by + (at most 200 characters)"}
    assert_error(await post(api, tenant, cid, "/keyboard/type", text="a" * 10_001), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/keyboard/type", text="a", delay_ms=1001), 422, "VALIDATION_ERROR")
    assert_error(await post(api, tenant, cid, "/keyboard/type", text="a", delay_ms=-1), 422, "VALIDATION_ERROR")
    assert (await post(api, tenant, cid, "/keyboard/type", text="a", delay_ms=1000)).json() == {"characters": 1}
    assert_error(await post(api, tenant, cid, "/keyboard/type"), 400, "MISSING_PARAM")
    unknown = await post(api, tenant, cid, "/keyboard/key", keys="ctrl+NoSuchKey")
    assert assert_error(unknown, 422, "VALIDATION_ERROR")["details"] == {"keys": "unknown key name 'NoSuchKey'"}
    for malformed in ("ctrl+", "+", "ctrl + l"):
        assert_error(await post(api, tenant, cid, "/keyboard/key", keys=malformed), 422, "VALIDATION_ERROR")
    assert (await post(api, tenant, cid, "/keyboard/key", keys="shift+Escape")).status_code == 200


async def test_windows_list_and_states(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, tenant, computer = desk
    cid = computer["id"]
    window = await open_xterm(api, tenant, cid, "state-probe", "sleep 120")
    assert set(window) == {"id", "title", "x", "y", "width", "height", "focused", "state"}
    assert window["state"] == "normal" and window["id"].startswith("0x")
    assert 0 <= window["x"] < 800 and 0 <= window["y"] < 600 and window["width"] > 100

    async def set_state(state: str) -> dict[str, Any]:
        response = await post(api, tenant, cid, f"/windows/{window['id']}/state", state=state)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["window"]
        return result

    maximized = await set_state("maximized")
    assert maximized["state"] == "maximized" and maximized["width"] >= 790
    assert (await set_state("normal"))["state"] == "normal"
    minimized = await set_state("minimized")
    assert minimized["state"] == "minimized" and not minimized["focused"]
    focused = await set_state("focused")
    assert focused["focused"] and focused["state"] == "normal"
    closed = await set_state("closed")
    assert closed["id"] == window["id"] and closed["title"] == "state-probe"
    with trio.fail_after(10):
        while any(w["id"] == window["id"] for w in await windows(api, tenant, cid)):
            await trio.sleep(0.05)
    gone = await post(api, tenant, cid, f"/windows/{window['id']}/state", state="focused")
    assert assert_error(gone, 404, "WINDOW_NOT_FOUND")["message"] == f"window not found: {window['id']}"
    assert_error(await post(api, tenant, cid, "/windows/not-a-window/state", state="focused"), 404, "WINDOW_NOT_FOUND")
    assert_error(await post(api, tenant, cid, f"/windows/{window['id']}/state", state="tiny"), 422, "VALIDATION_ERROR")


ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/screenshot", None),
    ("GET", "/screenshot/region?x=0&y=0&width=1&height=1", None),
    ("GET", "/screen", None),
    ("GET", "/cursor", None),
    ("POST", "/mouse/move", {"x": 1, "y": 1}),
    ("POST", "/mouse/click", {"x": 1, "y": 1}),
    ("POST", "/mouse/drag", {"from_x": 1, "from_y": 1, "to_x": 2, "to_y": 2}),
    ("POST", "/mouse/scroll", {"direction": "up"}),
    ("POST", "/keyboard/type", {"text": "a"}),
    ("POST", "/keyboard/key", {"keys": "Return"}),
    ("GET", "/windows", None),
    ("POST", "/windows/0x00400001/state", {"state": "focused"}),
]


async def test_every_route_is_404_for_another_tenant(desk: tuple[Api, Tenant, dict[str, Any]]) -> None:
    api, _, computer = desk
    other = await api.create_tenant("Other")
    for method, path, body in ROUTES:
        response = await call(api, other, method, computer["id"], D + path, json=body)
        assert_error(response, 404, "COMPUTER_NOT_FOUND")


async def test_every_route_is_409_unless_running(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    assert (await call(runtime_api, owner, "POST", cid, "/stop")).status_code == 200
    for method, path, body in ROUTES:
        response = await call(runtime_api, owner, method, cid, D + path, json=body)
        assert_error(response, 409, "COMPUTER_NOT_RUNNING")
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    # The desktop comes back with the computer.
    shot = await call(runtime_api, owner, "GET", cid, D + "/screenshot")
    assert shot.status_code == 200 and png_size(shot.content) == (1280, 800)
    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    assert_error(await call(runtime_api, owner, "GET", cid, D + "/screen"), 409, "COMPUTER_NOT_RUNNING")


async def test_resolution_on_create(runtime_api: Api, owner: Tenant) -> None:
    async def create(resolution: Any) -> Any:
        body = {"name": "r", "template_type": "svc-desktop", "resolution": resolution}
        return await runtime_api.request("POST", "/api/v1/computers", key=owner.key, json=body)

    for bad in ("639x480", "640x479", "3841x2160", "3840x2161", "big", "800X600", "800x", 800):
        assert "resolution" in assert_error(await create(bad), 422, "VALIDATION_ERROR")["details"], bad
    largest = await create("3840x2160")
    assert largest.status_code == 201 and largest.json()["resolution"] == "3840x2160"
    smallest = await create("640x480")
    assert smallest.status_code == 201
    await wait_for(runtime_api, owner, smallest.json()["id"], "running")
    screen = await call(runtime_api, owner, "GET", smallest.json()["id"], D + "/screen")
    assert screen.json() == {"width": 640, "height": 480}
    dims = await run(runtime_api, owner, smallest.json()["id"], "echo $DISPLAY; xdpyinfo | grep dimensions")
    assert dims["output"].startswith(":0\n") and "640x480 pixels" in dims["output"]


def test_characters_off_the_keyboard_map_are_typed_with_a_gap() -> None:
    assert typing_runs("abc", 12) == [("abc", 12)]
    assert typing_runs("wörld!", 12) == [("w", 12), ("ö", REMAPPED_GAP_MS), ("rld!", 12)]
    assert typing_runs("éé", 200) == [("éé", 200)]  # a longer delay asked for is kept
    assert typing_runs("a\\nb", 0) == [("a\\nb", 0)]
