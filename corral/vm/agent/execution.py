"""Running one command to completion with streamed output and a timeout.

Output is cut at line ends: an event carries the complete lines one read brought (a
partial line is flushed when the process ends or the buffer grows large), so the
control plane can split each event into `sandbox.exec.stdout` / `stderr` line events,
and a command printing a million short lines is not a million events. Past the timeout the whole process group
gets SIGTERM, then SIGKILL after a grace period, as the specification asks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import IO, Any

import trio

from .errors import AgentError

Emit = Callable[[dict[str, Any]], Awaitable[None]]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KILL_GRACE = 2.0
HEARTBEAT = 10.0
DRAIN_AFTER_EXIT = 0.25
FLUSH_AT = 64 * 1024


def base_environment(instance_env: dict[str, str], hostname: str) -> dict[str, str]:
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "HOSTNAME": hostname,
        "PIP_ROOT_USER_ACTION": "ignore",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.update(instance_env)
    return env


def signal_group(pid: int, signum: int) -> None:
    """Signal the process group `pid` leads (start_new_session made it a leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def exit_status(returncode: int | None) -> int:
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """A child process with trio streams for its pipes and a pidfd-based wait.

    `trio.lowlevel.open_process` runs `Popen` in a worker thread, which costs about
    2 ms per spawn here; `Popen` itself (vfork) takes 0.3 ms, so it is called
    directly and only the waiting is made asynchronous.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = self._stream(popen.stdout)
        self.stderr = self._stream(popen.stderr)
        self.stdin = self._stream(popen.stdin)

    @staticmethod
    def _stream(pipe: IO[bytes] | None) -> trio.lowlevel.FdStream | None:
        if pipe is None:
            return None
        stream = trio.lowlevel.FdStream(os.dup(pipe.fileno()))
        pipe.close()
        return stream

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        if self._popen.returncode is not None:
            return self._popen.returncode
        pidfd = os.pidfd_open(self.pid)
        try:
            while self._popen.poll() is None:
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return int(self._popen.returncode or 0)

    async def aclose_pipes(self) -> None:
        for pipe in (self.stdout, self.stderr):
            if pipe is not None:
                with trio.CancelScope(shield=True):
                    await pipe.aclose()


def check_runnable(command: str, env: dict[str, str]) -> None:
    """What `execve` cannot take, refused as the caller's mistake (400 INVALID_PARAM)
    before anything runs: a NUL in the command or in the environment, a variable
    name that is empty or has `=`."""
    if "\0" in command:
        raise AgentError(400, "INVALID_PARAM", "command must not contain NUL characters")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise AgentError(400, "INVALID_PARAM", f"environment variable {name!r}: a name must be non-empty, without '=' or NUL, and a value without NUL")


async def spawn(
    command: str,
    cwd: str,
    env: dict[str, str],
    combined: bool = False,
    stdin: bool = False,
) -> Child:
    """Start `/bin/sh -c command` in its own session; PROCESS_START_FAILED if it cannot.
    With `stdin` its standard input is a pipe (`Child.stdin`), else /dev/null. The
    caller has checked `check_runnable` (an exec before its answer's head)."""
    if not os.path.isdir(cwd):
        raise AgentError(500, "PROCESS_START_FAILED", f"working directory does not exist: {cwd}")
    try:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if combined else subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise AgentError(500, "PROCESS_START_FAILED", f"cannot start process: {exc}") from exc
    await trio.lowlevel.checkpoint()
    return Child(popen)


async def pump_lines(
    stream: trio.abc.ReceiveStream,
    on_line: Callable[[str], Awaitable[None]],
    on_bytes: Callable[[bytes], None] | None = None,
    per_line: bool = True,
) -> None:
    """Read `stream` to its end and hand over complete lines (with their newline):
    one at a time, or (`per_line=False`) all that one read completed, together;
    `on_bytes` also sees the raw bytes as they come."""
    buffer = b""
    while True:
        data = await stream.receive_some(65536)
        if not data:
            break
        if on_bytes is not None:
            on_bytes(bytes(data))
        buffer += data
        if b"\n" in buffer:
            head, _, buffer = buffer.rpartition(b"\n")
            if not per_line:
                await on_line((head + b"\n").decode("utf-8", "replace"))
                continue
            for line in (head + b"\n").splitlines(keepends=True):
                await on_line(line.decode("utf-8", "replace"))
        if len(buffer) >= FLUSH_AT:
            await on_line(buffer.decode("utf-8", "replace"))
            buffer = b""
    if buffer:
        await on_line(buffer.decode("utf-8", "replace"))


async def terminate(process: Child, grace: float = KILL_GRACE) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds, then reap."""
    signal_group(process.pid, signal.SIGTERM)
    with trio.move_on_after(grace):
        await process.wait()
        return
    signal_group(process.pid, signal.SIGKILL)
    with trio.CancelScope(shield=True):
        await process.wait()


async def execute(
    command: str,
    cwd: str,
    env: dict[str, str],
    timeout: float,
    emit: Emit,
    combined: bool = False,
    output_limit: int | None = None,
) -> dict[str, Any]:
    """Run a command, emitting `{"type": "stdout"|"stderr", "data"}`; return the exit event.

    Past `output_limit` bytes of a stream its output is read and dropped here, in the
    instance (the command runs on, never blocked on a full pipe), and the exit event
    says `truncated`: what the control plane holds of one exec stays bounded."""
    started = time.monotonic()
    process = await spawn(command, cwd, env, combined)
    send_lock = trio.Lock()
    timed_out = False
    room = {"stdout": output_limit, "stderr": output_limit}
    truncated = False

    def emitter(kind: str) -> Callable[[str], Awaitable[None]]:
        async def on_line(line: str) -> None:
            nonlocal truncated
            left = room[kind]
            if left is not None:
                if left <= 0:
                    truncated = True
                    return
                encoded = line.encode()
                if len(encoded) > left:
                    line, truncated = encoded[:left].decode("utf-8", "ignore"), True
                room[kind] = left - len(encoded)
            async with send_lock:
                await emit({"type": kind, "data": line})

        return on_line

    try:
        async with trio.open_nursery() as nursery:
            pumps_done = trio.Event()

            async def pumps() -> None:
                async with trio.open_nursery() as inner:
                    assert process.stdout is not None
                    # A read's lines go out as one event: `yes` is not a million sends.
                    inner.start_soon(pump_lines, process.stdout, emitter("stdout"), None, False)
                    if process.stderr is not None:
                        inner.start_soon(pump_lines, process.stderr, emitter("stderr"), None, False)
                pumps_done.set()

            nursery.start_soon(pumps)

            async def heartbeat() -> None:
                # Keeps the client's read timeout from firing on a silent command.
                while True:
                    await trio.sleep(HEARTBEAT)
                    async with send_lock:
                        await emit({"type": "heartbeat"})

            nursery.start_soon(heartbeat)
            with trio.move_on_after(timeout) as deadline:
                await process.wait()
            if deadline.cancelled_caught:
                timed_out = True
                await terminate(process)
            # A background child may keep the pipes open; do not wait for it forever.
            with trio.move_on_after(DRAIN_AFTER_EXIT):
                await pumps_done.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        if process.returncode is None:
            signal_group(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()
        raise
    finally:
        await process.aclose_pipes()
    return {
        "type": "exit",
        "exit_code": exit_status(process.returncode),
        "duration_ms": int((time.monotonic() - started) * 1000),
        "timed_out": timed_out,
        "truncated": truncated,
    }
