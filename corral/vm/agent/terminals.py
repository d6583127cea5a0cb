"""Terminals: a shell on a pseudo-terminal, reached over a WebSocket (contract §10).

A session is a shell on a PTY of its own (its controlling terminal), started with the
size and environment it is given. Its output is kept (the last `REPLAY_BYTES`) so a
client that reconnects sees the screen's recent output again; while no client is
attached the session waits `DETACHED_GRACE` seconds for one, then ends (SIGHUP to
the shell's process group, as a terminal emulator closing does). It ends by itself
when the shell exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import struct
import subprocess
import termios
import time
from dataclasses import dataclass, field

import trio

from .errors import AgentError
from .websocket import TEXT, WebSocket, WebSocketClosed

REPLAY_BYTES = 64 * 1024
DETACHED_GRACE = 60.0
MAX_SIZE = 1000


def check_size(cols: object, rows: object) -> tuple[int, int]:
    for name, value in (("cols", cols), ("rows", rows)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise AgentError(422, "VALIDATION_ERROR", f"{name} must be an integer from 1 to {MAX_SIZE}")
    return int(cols), int(rows)  # type: ignore[call-overload]


def set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


@dataclass
class Terminal:
    id: str
    shell: str
    cols: int
    rows: int
    master: int
    process: subprocess.Popen[bytes]
    output: bytearray = field(default_factory=bytearray)
    client: WebSocket | None = None
    detached_at: float | None = field(default_factory=time.monotonic)
    exited: trio.Event = field(default_factory=trio.Event)

    def to_json(self) -> dict[str, object]:
        return {
            "session_id": self.id,
            "shell": self.shell,
            "cols": self.cols,
            "rows": self.rows,
            "pid": self.process.pid,
            "attached": self.client is not None,
        }


class Terminals:
    """Every terminal session of the agent."""

    def __init__(self, nursery: trio.Nursery, base_env: dict[str, str]) -> None:
        self._nursery = nursery
        self._base_env = base_env
        self._sessions: dict[str, Terminal] = {}

    def get(self, session_id: str) -> Terminal:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise AgentError(404, "NOT_FOUND", f"terminal session not found: {session_id}") from None

    async def open(self, cols: object, rows: object, shell: str, env: dict[str, str] | None = None) -> Terminal:
        cols, rows = check_size(cols, rows)
        if not (os.path.isabs(shell) and os.path.isfile(shell) and os.access(shell, os.X_OK)):
            raise AgentError(422, "VALIDATION_ERROR", f"shell is not an executable in this computer: {shell}")
        master, slave = os.openpty()
        set_size(master, cols, rows)
        environment = {**self._base_env, **(env or {}), "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        home = environment.get("HOME", "/root")
        try:
            process = subprocess.Popen(
                [shell, "-l"] if os.path.basename(shell) in ("bash", "sh", "dash", "zsh") else [shell],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=home if os.path.isdir(home) else "/",
                env=environment,
                start_new_session=True,
                preexec_fn=_take_controlling_terminal,
            )
        except OSError as exc:
            os.close(master)
            raise AgentError(422, "VALIDATION_ERROR", f"shell could not be started: {exc}") from exc
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        terminal = Terminal(secrets.token_hex(12), shell, cols, rows, master, process)
        self._sessions[terminal.id] = terminal
        self._nursery.start_soon(self._pump, terminal)
        self._nursery.start_soon(self._reap_when_detached, terminal)
        return terminal

    def resize(self, session_id: str, cols: object, rows: object) -> Terminal:
        terminal = self.get(session_id)
        terminal.cols, terminal.rows = check_size(cols, rows)
        set_size(terminal.master, terminal.cols, terminal.rows)  # the kernel sends SIGWINCH
        return terminal

    def close(self, session_id: str) -> None:
        terminal = self.get(session_id)
        _hang_up(terminal)

    async def _pump(self, terminal: Terminal) -> None:
        """The shell's output into the replay buffer and to the attached client, until it exits."""
        stream = trio.lowlevel.FdStream(os.dup(terminal.master))
        try:
            while True:
                try:
                    data = await stream.receive_some(65536)
                except (OSError, trio.BrokenResourceError):  # EIO: the shell and its children are gone
                    break
                if not data:
                    break
                terminal.output += data
                if len(terminal.output) > REPLAY_BYTES:
                    del terminal.output[: len(terminal.output) - REPLAY_BYTES]
                client = terminal.client
                if client is not None:
                    with contextlib.suppress(WebSocketClosed):
                        await client.send_binary(data)
        finally:
            await stream.aclose()
            with contextlib.suppress(OSError):
                os.close(terminal.master)
            await trio.to_thread.run_sync(terminal.process.wait)
            self._sessions.pop(terminal.id, None)
            terminal.exited.set()
            if terminal.client is not None:
                await terminal.client.close()

    async def _reap_when_detached(self, terminal: Terminal) -> None:
        while not terminal.exited.is_set():
            with trio.move_on_after(1):
                await terminal.exited.wait()
            detached = terminal.detached_at
            if terminal.client is None and detached is not None and time.monotonic() - detached > DETACHED_GRACE:
                _hang_up(terminal)
                return

    async def attach(self, terminal: Terminal, client: WebSocket) -> None:
        """Bridge `client` to the terminal: replay, then both ways until either side ends.

        A newer client takes the session over from an older one."""
        previous, terminal.client, terminal.detached_at = terminal.client, client, None
        if previous is not None:
            await previous.close(4000)
        try:
            if terminal.output:
                await client.send_binary(bytes(terminal.output))
            async with trio.open_nursery() as nursery:

                async def until_exit() -> None:
                    await terminal.exited.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_exit)
                while True:
                    opcode, payload = await client.receive()
                    if opcode == TEXT and self._control(terminal, payload):
                        continue
                    await trio.to_thread.run_sync(_write_all, terminal.master, payload)
        except (WebSocketClosed, OSError):
            pass
        finally:
            if terminal.client is client:
                terminal.client, terminal.detached_at = None, time.monotonic()
            await client.close()

    def _control(self, terminal: Terminal, payload: bytes) -> bool:
        """A text frame `{"type": "resize", "cols": C, "rows": R}` resizes; True if it was one."""
        if not payload.startswith(b"{"):
            return False
        try:
            message = json.loads(payload)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("type") != "resize":
            return False
        with contextlib.suppress(AgentError):
            self.resize(terminal.id, message.get("cols"), message.get("rows"))
        return True


def _take_controlling_terminal() -> None:
    """In the child, after setsid: stdin (the PTY's other end) becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.005)
            continue
        view = view[written:]


def _hang_up(terminal: Terminal) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(terminal.process.pid, signal.SIGHUP)
