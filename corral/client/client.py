"""`Client` and `AsyncClient`: every generated operation, plus the helpers a user of a
compute platform reaches for first: waiting for a state, following a process's
output, moving files, and opening a terminal.

    from corral.client import Client

    with Client.from_env() as corral:            # CORRAL_API_URL, CORRAL_API_KEY or `corral login`
        box = corral.create_sandbox(name="demo")["data"]
        corral.wait_for("sandbox", box["id"], "running")
        run = corral.exec_stream(box["id"], "echo hello")
        for line in run:
            print(line.stream, line.line)
        print(run.exit_code)
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ._base import AsyncEventStream, EventStream
from ._generated import AsyncOperations, Operations
from .config import load_credentials
from .errors import ResourceFailed, WaitTimeout
from .sse import Event
from .terminal import AsyncTerminal, Terminal, open_async_terminal

__all__ = ["AsyncClient", "AsyncProcessRun", "Client", "OutputLine", "ProcessRun", "unwrap"]

FAILED_STATES = frozenset({"error", "failed", "destroyed", "deleted", "cancelled", "canceled"})
FILE_KINDS = {"sandbox": "sandboxes", "computer": "computers"}
AGENT_RUN_EVENTS = "/api/v1/agent-runs/{run_id}/events"


def unwrap(body: Any) -> Any:
    """The record inside `{data: ...}`; unwrapped bodies (computers, exec, files) as they are."""
    return body["data"] if isinstance(body, dict) and "data" in body else body


def state_of(record: dict[str, Any]) -> str | None:
    """`status` (most resources) or `state` (deployments)."""
    value = record.get("status", record.get("state"))
    return str(value) if value is not None else None


def _wanted(status: str | Iterable[str]) -> frozenset[str]:
    return frozenset([status] if isinstance(status, str) else status)


def _files_path(kind: str, suffix: str) -> str:
    if kind not in FILE_KINDS:
        raise ValueError(f"files live in a sandbox or a computer, not a {kind!r}")
    return f"/api/v1/{FILE_KINDS[kind]}/{{id}}/files/{suffix}"


@dataclass(frozen=True)
class OutputLine:
    """One line a process wrote: `stream` is `stdout` or `stderr`."""

    stream: str
    line: str
    ts: str | None = None


def _output(event: Event) -> OutputLine | None:
    if event.event == "log" and isinstance(event.data, dict):
        return OutputLine(str(event.data.get("stream", "stdout")), str(event.data.get("line", "")), event.data.get("ts"))
    return None


class ProcessRun:
    """A sandbox process's output as it is written; `exit_code` and `status` once it ended.

    Iterating follows the process's SSE stream (`event: log` lines, then `event: exit`)
    from its first line, so nothing written before the stream opened is missed."""

    def __init__(self, client: Client, sandbox_id: str, process: dict[str, Any]) -> None:
        self._client = client
        self.sandbox_id = sandbox_id
        self.process = process
        self.pid: str = process["pid"]
        self.exit_code: int | None = None
        self.status: str | None = None

    def __iter__(self) -> Iterator[OutputLine]:
        with self._client.stream_sandbox_process(self.sandbox_id, self.pid) as stream:
            for event in stream:
                line = _output(event)
                if line is not None:
                    yield line
                elif event.event == "exit" and isinstance(event.data, dict):
                    self.exit_code = event.data.get("exit_code")
                    self.status = event.data.get("status")
                    return

    def wait(self, on_line: Callable[[OutputLine], None] | None = None) -> int | None:
        """Follow to the end; the exit code."""
        for line in self:
            if on_line is not None:
                on_line(line)
        return self.exit_code


class Client(Operations):
    """The blocking client: every operation of the API and the helpers."""

    @classmethod
    def from_env(cls, url: str | None = None, api_key: str | None = None, **options: Any) -> Client:
        """Arguments, else CORRAL_API_URL / CORRAL_API_KEY, else what `corral login` stored."""
        credentials = load_credentials(url, api_key)
        return cls(credentials.url, credentials.api_key, **options)

    def __enter__(self) -> Client:
        return self

    def health(self) -> Any:
        return self.request("GET", self.base_url + "/healthz", auth=False).json()

    def openapi(self) -> Any:
        return self.request("GET", self.base_url + "/api/v1/openapi.json", auth=False).json()

    def wait_for(
        self,
        kind: str,
        id: str,
        status: str | Iterable[str] = "running",
        *,
        timeout: float = 180.0,
        interval: float = 0.5,
        on_change: Callable[[str | None], None] | None = None,
    ) -> dict[str, Any]:
        """Poll `get_<kind>(id)` until its status is one of `status`; the record.

        Raises `ResourceFailed` when it reaches a failed state (`error`, `failed`,
        `deleted`, ...) that was not asked for, and `WaitTimeout` after `timeout` s.
        `on_change` is called with each new status (a progress display)."""
        getter = getattr(self, f"get_{kind}", None)
        if getter is None:
            raise ValueError(f"no operation get_{kind}")
        wanted, deadline, last = _wanted(status), time.monotonic() + timeout, None
        while True:
            record = unwrap(getter(id))
            current = state_of(record)
            if current != last and on_change is not None:
                on_change(current)
            last = current
            if current in wanted:
                return dict(record)
            if current in FAILED_STATES:
                raise ResourceFailed(f"{kind} {id} is {current}, not {'/'.join(sorted(wanted))}", record)
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"{kind} {id} still {current} after {timeout:g} s (waiting for {'/'.join(sorted(wanted))})")
            time.sleep(interval)

    def iterate(self, operation: Callable[..., Any], /, **arguments: Any) -> Iterator[Any]:
        """Every item of a `limit`/`cursor` list, page after page."""
        cursor = None
        while True:
            body = operation(**arguments, cursor=cursor) if cursor else operation(**arguments)
            yield from unwrap(body)
            cursor = body.get("next_cursor") if isinstance(body, dict) else None
            if not cursor:
                return

    def upload(self, id: str, source: str | Path | bytes, path: str | None = None, *, kind: str = "sandbox", filename: str | None = None) -> Any:
        """Upload a local file (or bytes) into a sandbox or computer (10 MB at most).

        `path` is the destination: a file path, or a directory ending in `/`; the
        server's default directory when omitted."""
        content = source if isinstance(source, bytes) else Path(source).read_bytes()
        name = filename or (posixpath.basename(str(source)) if not isinstance(source, bytes) else "upload")
        data = {"path": path} if path else None
        response = self.request("POST", self.url(_files_path(kind, "upload"), {"id": id}), files={"file": (name, content)}, data=data)
        return response.json()

    def download(self, id: str, path: str, destination: str | Path | None = None, *, kind: str = "sandbox") -> bytes | Path:
        """A file's bytes, or written to `destination` as it arrives (then its path)."""
        url = self.url(_files_path(kind, "download"), {"id": id})
        if destination is None:
            return bytes(self.request("GET", url, params={"path": path}, headers={"Accept": "*/*"}).content)
        target = Path(destination)
        with self.open_stream("GET", url, params={"path": path}, headers={"Accept": "*/*"}) as response, target.open("wb") as out:
            for chunk in response.iter_bytes():
                out.write(chunk)
        return target

    def exec_stream(self, sandbox_id: str, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None, name: str | None = None) -> ProcessRun:
        """Run `command` as a sandbox process and follow its output as it is written."""
        body: dict[str, Any] = {"cmd": command}
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = env
        if name:
            body["name"] = name
        process = unwrap(self.create_sandbox_process(sandbox_id, **body))
        return ProcessRun(self, sandbox_id, process)

    def follow_agent_run(self, run_id: str, *, last_event_id: str | None = None) -> EventStream:
        """An agent run's events as they happen (`GET /agent-runs/{id}/events?stream=true`):
        the recorded ones first, then live; the stream ends after the terminal event."""
        return self.events(AGENT_RUN_EVENTS, path={"run_id": run_id}, query={"stream": "true"}, last_event_id=last_event_id)

    def terminal(self, computer_id: str, *, cols: int = 80, rows: int = 24, shell: str | None = None, connect_to: str | None = None) -> Terminal:
        """A new shell on a PTY in the computer, connected."""
        extra: dict[str, Any] = {"shell": shell} if shell else {}
        session = unwrap(self.computer_terminal(computer_id, cols=cols, rows=rows, **extra))
        return Terminal(session["ws_url"], connect_to=connect_to)


class AsyncProcessRun:
    """`ProcessRun` for the async client."""

    def __init__(self, client: AsyncClient, sandbox_id: str, process: dict[str, Any]) -> None:
        self._client = client
        self.sandbox_id = sandbox_id
        self.process = process
        self.pid: str = process["pid"]
        self.exit_code: int | None = None
        self.status: str | None = None

    async def lines(self) -> AsyncIterator[OutputLine]:
        async with self._client.stream_sandbox_process(self.sandbox_id, self.pid) as stream:
            async for event in stream:
                line = _output(event)
                if line is not None:
                    yield line
                elif event.event == "exit" and isinstance(event.data, dict):
                    self.exit_code = event.data.get("exit_code")
                    self.status = event.data.get("status")
                    return

    async def wait(self, on_line: Callable[[OutputLine], None] | None = None) -> int | None:
        lines = self.lines()
        try:
            async for line in lines:
                if on_line is not None:
                    on_line(line)
        finally:
            await lines.aclose()  # type: ignore[attr-defined]
        return self.exit_code


class AsyncClient(AsyncOperations):
    """The async client (trio or asyncio): every operation and the helpers."""

    @classmethod
    def from_env(cls, url: str | None = None, api_key: str | None = None, **options: Any) -> AsyncClient:
        credentials = load_credentials(url, api_key)
        return cls(credentials.url, credentials.api_key, **options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def health(self) -> Any:
        return (await self.request("GET", self.base_url + "/healthz", auth=False)).json()

    async def iterate(self, operation: Callable[..., Any], /, **arguments: Any) -> AsyncIterator[Any]:
        """Every item of a `limit`/`cursor` list, page after page."""
        cursor = None
        while True:
            body = await (operation(**arguments, cursor=cursor) if cursor else operation(**arguments))
            for item in unwrap(body):
                yield item
            cursor = body.get("next_cursor") if isinstance(body, dict) else None
            if not cursor:
                return

    @asynccontextmanager
    async def terminal(
        self, computer_id: str, *, cols: int = 80, rows: int = 24, shell: str | None = None, connect_to: str | None = None
    ) -> AsyncIterator[AsyncTerminal]:
        """A new shell on a PTY in the computer (trio): `async with client.terminal(id) as term`."""
        extra: dict[str, Any] = {"shell": shell} if shell else {}
        session = unwrap(await self.computer_terminal(computer_id, cols=cols, rows=rows, **extra))
        async with open_async_terminal(session["ws_url"], connect_to=connect_to) as term:
            yield term

    async def wait_for(
        self,
        kind: str,
        id: str,
        status: str | Iterable[str] = "running",
        *,
        timeout: float = 180.0,
        interval: float = 0.5,
        on_change: Callable[[str | None], None] | None = None,
    ) -> dict[str, Any]:
        getter = getattr(self, f"get_{kind}", None)
        if getter is None:
            raise ValueError(f"no operation get_{kind}")
        wanted, deadline, last = _wanted(status), time.monotonic() + timeout, None
        while True:
            record = unwrap(await getter(id))
            current = state_of(record)
            if current != last and on_change is not None:
                on_change(current)
            last = current
            if current in wanted:
                return dict(record)
            if current in FAILED_STATES:
                raise ResourceFailed(f"{kind} {id} is {current}, not {'/'.join(sorted(wanted))}", record)
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"{kind} {id} still {current} after {timeout:g} s (waiting for {'/'.join(sorted(wanted))})")
            await anyio.sleep(interval)

    async def upload(self, id: str, source: str | Path | bytes, path: str | None = None, *, kind: str = "sandbox", filename: str | None = None) -> Any:
        content = source if isinstance(source, bytes) else await anyio.Path(source).read_bytes()
        name = filename or (posixpath.basename(str(source)) if not isinstance(source, bytes) else "upload")
        data = {"path": path} if path else None
        response = await self.request("POST", self.url(_files_path(kind, "upload"), {"id": id}), files={"file": (name, content)}, data=data)
        return response.json()

    async def download(self, id: str, path: str, *, kind: str = "sandbox") -> bytes:
        url = self.url(_files_path(kind, "download"), {"id": id})
        return bytes((await self.request("GET", url, params={"path": path}, headers={"Accept": "*/*"})).content)

    def follow_agent_run(self, run_id: str, *, last_event_id: str | None = None) -> AsyncEventStream:
        """An agent run's events as they happen, recorded ones first; ends after the terminal event."""
        return self.events(AGENT_RUN_EVENTS, path={"run_id": run_id}, query={"stream": "true"}, last_event_id=last_event_id)

    async def exec_stream(self, sandbox_id: str, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None, name: str | None = None) -> AsyncProcessRun:
        body: dict[str, Any] = {"cmd": command}
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = env
        if name:
            body["name"] = name
        process = unwrap(await self.create_sandbox_process(sandbox_id, **body))
        return AsyncProcessRun(self, sandbox_id, process)
