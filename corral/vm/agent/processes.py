"""Background processes: spawn, list, kill, exit detection and bounded line logs.

The table lives in the agent, not the control plane, so that a restarted control
plane re-reads a process's state and logs instead of losing them. Logs are kept
line by line with a sequence number and a timestamp, bounded in lines and bytes;
readers ask for the last `tail` lines, or for the lines after a sequence number
(waiting for new ones: long-poll and streaming both use that).
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

from .errors import AgentError
from .execution import Child, check_runnable, exit_status, pump_lines, signal_group, spawn

MAX_LINES = 10_000
MAX_LINE_CHARS = 16_384
KILL_GRACE = 5.0
CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_process_id() -> str:
    """`proc_` + a lowercase ULID, as the control plane's ids module makes them."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    chars = []
    for _ in range(26):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "proc_" + "".join(reversed(chars))


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


@dataclass
class LogLine:
    seq: int
    ts: float
    stream: str
    line: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.seq, "ts": iso(self.ts), "stream": self.stream, "line": self.line}


@dataclass
class ManagedProcess:
    id: str
    name: str
    cmd: str
    cwd: str
    started_at: float
    status: str = "running"
    exited_at: float | None = None
    exit_code: int | None = None
    os_pid: int | None = None
    logs: deque[LogLine] = field(default_factory=lambda: deque(maxlen=MAX_LINES))
    next_seq: int = 1
    changed: trio.Event = field(default_factory=trio.Event)
    process: Child | None = None
    killing: bool = False
    capture_limit: int = 0
    """Bytes of stdout and of stderr kept exactly (`output()`), beside the line logs."""
    captured: dict[str, bytearray] = field(default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()})
    seen: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})

    def capture(self, stream: str, data: bytes) -> None:
        self.seen[stream] += len(data)
        kept = self.captured[stream]
        if len(kept) < self.capture_limit:
            kept += data[: self.capture_limit - len(kept)]

    def output(self) -> dict[str, Any]:
        """The kept bytes (base64) and how many each stream wrote in all."""
        return {
            "stdout": base64.b64encode(bytes(self.captured["stdout"])).decode(),
            "stderr": base64.b64encode(bytes(self.captured["stderr"])).decode(),
            "stdout_bytes": self.seen["stdout"],
            "stderr_bytes": self.seen["stderr"],
            "process": self.to_json(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.id,
            "name": self.name,
            "cmd": self.cmd,
            "cwd": self.cwd,
            "status": self.status,
            "started_at": iso(self.started_at),
            "exited_at": iso(self.exited_at),
            "exit_code": self.exit_code,
            "os_pid": self.os_pid,
        }

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def append(self, stream: str, line: str) -> None:
        text = line.rstrip("\n")[:MAX_LINE_CHARS]
        self.logs.append(LogLine(self.next_seq, time.time(), stream, text))
        self.next_seq += 1
        self._notify()

    def tail(self, count: int) -> list[LogLine]:
        if count <= 0:
            return []
        return list(self.logs)[-count:]

    def after(self, seq: int) -> list[LogLine]:
        return [entry for entry in self.logs if entry.seq > seq]

    async def wait_after(self, seq: int, timeout: float) -> list[LogLine]:
        """Lines after `seq`, waiting up to `timeout` for some (or for the exit)."""
        with trio.move_on_after(timeout):
            while True:
                lines = self.after(seq)
                if lines or self.finished:
                    return lines
                await self.changed.wait()
        return self.after(seq)


class ProcessTable:
    """Every background process the agent started since it came up."""

    def __init__(self, nursery: trio.Nursery, base_env: dict[str, str]) -> None:
        self._nursery = nursery
        self._base_env = base_env
        self._processes: dict[str, ManagedProcess] = {}

    def list(self) -> list[ManagedProcess]:
        return list(self._processes.values())

    def get(self, process_id: str) -> ManagedProcess:
        try:
            return self._processes[process_id]
        except KeyError:
            raise AgentError(404, "NOT_FOUND", f"process not found: {process_id}") from None

    async def spawn(
        self,
        cmd: str,
        cwd: str = "/workspace",
        env: dict[str, str] | None = None,
        name: str | None = None,
        process_id: str | None = None,
        stdin: str | None = None,
        capture: int = 0,
    ) -> ManagedProcess:
        """Start `cmd`; `stdin` is written to its standard input (then closed), and the
        first `capture` bytes of stdout and of stderr are kept exactly."""
        process_id = process_id or new_process_id()
        if process_id in self._processes:
            raise AgentError(409, "DUPLICATE_PROCESS", f"process id already used: {process_id}")
        merged_env = dict(self._base_env)
        merged_env.update(env or {})
        check_runnable(cmd, merged_env)
        record = ManagedProcess(process_id, name or cmd.split(" ", 1)[0], cmd, cwd, time.time(), capture_limit=max(0, capture))
        record.process = await spawn(cmd, cwd, merged_env, stdin=stdin is not None)
        record.os_pid = record.process.pid
        self._processes[process_id] = record
        self._nursery.start_soon(self._supervise, record)
        if stdin is not None and record.process.stdin is not None:
            self._nursery.start_soon(_feed, record.process.stdin, stdin.encode())
        return record

    async def _supervise(self, record: ManagedProcess) -> None:
        process = record.process
        assert process is not None

        async def on_line(stream: str, line: str) -> None:
            record.append(stream, line)

        pumps_done = trio.Event()

        async def pumps() -> None:
            assert process.stdout is not None and process.stderr is not None
            async with trio.open_nursery() as inner:
                inner.start_soon(pump_lines, process.stdout, lambda line: on_line("stdout", line), lambda data: record.capture("stdout", data))
                inner.start_soon(pump_lines, process.stderr, lambda line: on_line("stderr", line), lambda data: record.capture("stderr", data))
            pumps_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pumps)
            await process.wait()
            with trio.move_on_after(0.25):
                # Children may still hold the pipes; keep reading them briefly (the end
                # is noticed at once, not at the next poll: a run's end waits on it).
                await pumps_done.wait()
            nursery.cancel_scope.cancel()
        await process.aclose_pipes()
        record.exit_code = exit_status(process.returncode)
        record.exited_at = time.time()
        record.status = "killed" if record.killing else "exited"
        record._notify()

    async def kill(self, process_id: str, grace: float = KILL_GRACE) -> ManagedProcess:
        """SIGTERM to the process group, SIGKILL after `grace`; the status becomes killed."""
        record = self.get(process_id)
        if record.finished or record.process is None:
            return record
        record.killing = True
        signal_group(record.process.pid, signal.SIGTERM)
        with trio.move_on_after(grace):
            while not record.finished:
                await record.changed.wait()
            return record
        signal_group(record.process.pid, signal.SIGKILL)
        while not record.finished:
            await record.changed.wait()
        return record

    def kill_all_now(self) -> None:
        for record in self._processes.values():
            if not record.finished and record.process is not None:
                signal_group(record.process.pid, signal.SIGKILL)


async def _feed(pipe: trio.lowlevel.FdStream, data: bytes) -> None:
    """Write `data` to a process's standard input and close it; a process that exits
    without reading it all is not an error."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await pipe.send_all(data)
    with contextlib.suppress(OSError):
        await pipe.aclose()
