"""Terminals (contract §10): real shells on real PTYs in the guest agent, through the preview router,
opened with trio-websocket and with Python's `websockets`."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream
from websockets.sync.client import ClientConnection, connect

from tests.http.computer_support import call, create_running, websocket_upgrade
from tests.support import Api, Tenant, assert_error


@asynccontextmanager
async def terminal_socket(api: Api, url: str) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket to `url` through the preview router on 127.0.0.1, with the URL's Host."""
    parts = urlsplit(url)
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", api.platform.settings.preview_port)
        ws = await wrap_client_stream(nursery, stream, parts.netloc, f"{parts.path}?{parts.query}")
        try:
            yield ws
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()


async def read_until(ws: WebSocketConnection, needle: bytes, timeout: float = 10) -> bytes:
    seen = b""
    with trio.fail_after(timeout):
        while needle not in seen:
            message = await ws.get_message()
            seen += message if isinstance(message, bytes) else message.encode()
    return seen


async def open_terminal(api: Api, tenant: Tenant, computer_id: str, **body: Any) -> dict[str, Any]:
    response = await call(api, tenant, "POST", computer_id, "/terminal", json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_a_terminal_runs_a_shell_that_follows_resizes(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    session = await open_terminal(runtime_api, owner, cid)
    assert set(session) == {"session_id", "ws_url", "stream_auth", "expires_at", "computer_id"}
    port = runtime_api.platform.settings.preview_port
    assert session["ws_url"] == (
        f"ws://{computer['slug']}.corral.localhost:{port}/terminal/{session['session_id']}?auth={session['stream_auth']}"
    )
    async with terminal_socket(runtime_api, session["ws_url"]) as ws:
        await read_until(ws, b"# ")
        await ws.send_message(b"echo hi-$((6*7)); stty size; echo $TERM $DISPLAY; tty\n")
        out = await read_until(ws, b"/dev/pts/")
        assert b"hi-42\r\n24 80\r\nxterm-256color :0\r\n" in out  # the default size, a real PTY
        resized = await call(runtime_api, owner, "POST", cid, f"/pty/{session['session_id']}/resize", json={"cols": 100, "rows": 30})
        assert resized.status_code == 200 and resized.json() == {"status": "resized", "cols": 100, "rows": 30}
        await ws.send_message("stty size\n")  # text frames are input too
        assert b"30 100\r\n" in await read_until(ws, b"30 100")
        await ws.send_message(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
        await ws.send_message(b"stty size\n")
        assert b"43 132\r\n" in await read_until(ws, b"43 132")


def _receive_until(ws: ClientConnection, needle: bytes, timeout: float = 20) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        seen += message if isinstance(message, bytes) else message.encode()
    return seen


async def test_the_terminal_opens_with_pythons_websockets_library(runtime_api: Api, owner: Tenant) -> None:
    """The `ws_url` as given, opened by `websockets` (strict about the handshake's status
    line: it refused `HTTP/1.1 101` without a reason phrase, issue 26), through the
    preview router to the guest agent; only the TCP connection goes to 127.0.0.1, as
    DNS would send the computer's host there."""
    computer = await create_running(runtime_api, owner)
    session = await open_terminal(runtime_api, owner, computer["id"])
    port = runtime_api.platform.settings.preview_port

    def shell() -> tuple[int, str, bytes]:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        with connect(session["ws_url"], sock=sock, proxy=None, open_timeout=30, close_timeout=5) as ws:
            _receive_until(ws, b"# ")
            ws.send(b"echo strict-$((6*7))\n")
            out = _receive_until(ws, b"strict-42\r\n")
            assert ws.response is not None
            return ws.response.status_code, ws.response.reason_phrase, out

    status, reason, out = await trio.to_thread.run_sync(shell)
    assert (status, reason) == (101, "Switching Protocols")
    assert b"strict-42\r\n" in out


async def test_a_dropped_socket_reattaches_with_the_recent_output(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    session = await open_terminal(runtime_api, owner, computer["id"], cols=1000, rows=1)
    async with terminal_socket(runtime_api, session["ws_url"]) as ws:
        await read_until(ws, b"# ")
        await ws.send_message(b"sleep 1; echo written-while-away\n")
    await trio.sleep(1.5)  # the output arrives while nobody is attached
    async with terminal_socket(runtime_api, session["ws_url"]) as ws:
        replay = await read_until(ws, b"written-while-away")
        assert b"sleep 1; echo written-while-away" in replay  # the screen's recent output, replayed
        await ws.send_message(b"stty size; exit\n")
        assert b"1 1000\r\n" in await read_until(ws, b"1 1000")
        # The shell exits: the session ends and the socket closes.
        with trio.fail_after(10):
            try:
                while True:
                    await ws.get_message()
            except ConnectionClosed:
                pass
    gone = await call(runtime_api, owner, "POST", computer["id"], f"/pty/{session['session_id']}/resize", json={"cols": 5, "rows": 5})
    assert_error(gone, 404, "NOT_FOUND")


async def test_terminal_errors(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    for bad in ({"cols": 0}, {"cols": 1001}, {"rows": 0}, {"rows": 1001}, {"cols": "80"}, {"rows": 2.5}):
        assert_error(await call(runtime_api, owner, "POST", cid, "/terminal", json=bad), 422, "VALIDATION_ERROR")
    largest = await open_terminal(runtime_api, owner, cid, cols=1000, rows=1000, shell="/bin/sh")
    assert largest["session_id"]
    for shell in ("/bin/nope", "/etc/passwd", "bash"):
        assert_error(await call(runtime_api, owner, "POST", cid, "/terminal", json={"shell": shell}), 422, "VALIDATION_ERROR")
    sid = largest["session_id"]
    for bad in ({"cols": 0, "rows": 5}, {"cols": 5, "rows": 1001}, {"cols": 5}):
        response = await call(runtime_api, owner, "POST", cid, f"/pty/{sid}/resize", json=bad)
        assert response.status_code in (400, 422) and response.json()["error"]["code"] in ("VALIDATION_ERROR", "MISSING_PARAM")
    assert_error(await call(runtime_api, owner, "POST", cid, "/pty/nosuchsession/resize", json={"cols": 5, "rows": 5}), 404, "NOT_FOUND")

    other = await runtime_api.create_tenant("Other")
    assert_error(await call(runtime_api, other, "POST", cid, "/terminal", json={}), 404, "COMPUTER_NOT_FOUND")
    assert_error(await call(runtime_api, other, "POST", cid, f"/pty/{sid}/resize", json={"cols": 5, "rows": 5}), 404, "COMPUTER_NOT_FOUND")

    # The WebSocket: no, a wrong or another computer's token is refused before the upgrade.
    second = await create_running(runtime_api, owner)
    others = await open_terminal(runtime_api, owner, second["id"])
    base = largest["ws_url"].split("?")[0]
    for url in (base + "?x=1", base + "?auth=dt_wrong", f"{base}?auth={others['stream_auth']}"):
        assert (await websocket_upgrade(runtime_api, url))[0] == 401, url
    unknown = f"{base.rsplit('/', 1)[0]}/nosuchsession?auth={largest['stream_auth']}"
    assert (await websocket_upgrade(runtime_api, unknown))[0] == 404

    assert (await call(runtime_api, owner, "POST", cid, "/stop")).status_code == 200
    assert_error(await call(runtime_api, owner, "POST", cid, "/terminal", json={}), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(runtime_api, owner, "POST", cid, f"/pty/{sid}/resize", json={"cols": 5, "rows": 5}), 409, "COMPUTER_NOT_RUNNING")
