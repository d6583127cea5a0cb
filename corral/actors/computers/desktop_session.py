"""The desktop session of a desktop computer: what it needs and when it is up.

The guest agent starts the template's X server (Xvnc, which is also the VNC server)
and window manager when the instance boots (`corral.vm.agent.services`). A desktop
computer is `running` only once X answers with its window manager and the VNC socket
exists, so that the first window, screenshot or click after `running` never races the
session's start.
"""

from __future__ import annotations

import trio

from corral.vm import (
    DESKTOP_GATEWAY,
    VNC_SOCKET,
    WM_READY,
    AgentClient,
    LaunchFailed,
    RuntimeErrorBase,
)

DISPLAY = ":0"
READY_TIMEOUT = 60.0
READY_CHECK = (
    f"test -S {VNC_SOCKET} && test -e {WM_READY} "
    f"&& ss -Hltn src {DESKTOP_GATEWAY[0]}:{DESKTOP_GATEWAY[1]} | grep -q ."
)
"""The VNC socket exists, the window manager has started (a window opened before it
manages windows is never managed), and the desktop page's gateway listens."""


def desktop_env(resolution: str) -> dict[str, str]:
    """What every process of a desktop computer sees: its display, the display's size, and
    a UTF-8 locale (xterm and Firefox read and type text beyond ASCII only in one)."""
    return {"DISPLAY": DISPLAY, "CORRAL_RESOLUTION": resolution, "LANG": "C.UTF-8"}


async def wait_for_desktop(agent: AgentClient, timeout: float = READY_TIMEOUT) -> None:
    """Return once the X server and its window manager answer and VNC listens;
    LaunchFailed after `timeout`."""
    last = ""
    with trio.move_on_after(timeout):
        while True:
            try:
                result = await agent.exec(READY_CHECK, timeout=5)
                if result.exit_code == 0:
                    return
                last = f"exit {result.exit_code}"
            except RuntimeErrorBase as exc:
                last = str(exc)
            await trio.sleep(0.05)
    raise LaunchFailed(f"the desktop session did not come up within {timeout:.0f} s ({last})")
