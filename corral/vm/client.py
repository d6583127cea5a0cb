"""The one module through which the control plane talks to a guest agent.

Transport failures (refused, timed out, stream cut) raise `AgentUnavailable`
(AGENT_UNAVAILABLE, 502), whose message names no address (that is in its `detail`,
for the log: contract §18); an instance without an address raises
`RuntimeUnavailable` (SANDBOX_RUNTIME_UNAVAILABLE, 409); the agent's own error
codes come back as the matching exceptions of `corral.vm.errors` (FORBIDDEN_PATH,
FILE_NOT_FOUND, DESTINATION_EXISTS, PROCESS_START_FAILED, ...).

HTTP/1.1 is spoken with h11 over trio streams with a small keep-alive pool rather
than through httpx: an exec round trip must stay within a few milliseconds, and
httpx alone costs about 2 ms per request here against 0.3 ms for this. Create one
`AgentClient` per instance and close it with `aclose()` (or `async with`).

With a tracer provider installed (only when spans are exported) each call is a client
span `agent <METHOD> <path template>`: ids in the path become `{id}`, and neither the
query nor the agent's token is recorded.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlencode

import h11
import trio
from opentelemetry import trace

from corral.sockets import RECEIVE_SIZE, DirectSocket
from corral.tracer import recording_tracer

from .driver import InstanceInfo, InstanceState
from .errors import AGENT_ERRORS, AgentError, AgentUnavailable, FileTooLarge, RuntimeUnavailable

NOT_ANSWERING = "the instance's agent does not answer"
"""What a tenant reads when the agent cannot be reached; where it was tried goes in `detail`."""
STREAM_READ_TIMEOUT = 45.0  # the agent sends a heartbeat at least every 15 s
CONNECT_TIMEOUT = 3.0
MAX_IDLE = 8


_ID_SEGMENTS = frozenset({"processes", "terminals"})
"""Agent paths whose next segment is an id (`/processes/{id}/output`)."""


def _path_template(path: str) -> str:
    parts = path.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i] in _ID_SEGMENTS:
            parts[i + 1] = "{id}"
    return "/".join(parts)


def _start_span(method: str, path: str) -> trace.Span | None:
    """A client span for one agent call, or None while no tracer provider is installed."""
    tracer = recording_tracer(__name__)
    if tracer is None:
        return None
    template = _path_template(path)
    return tracer.start_span(
        f"agent {method} {template}",
        kind=trace.SpanKind.CLIENT,
        attributes={"http.method": method, "corral.agent.path": template},
    )


def _end_span(span: trace.Span | None, status: int | None, error: BaseException | None = None) -> None:
    if span is None:
        return
    if status is not None:
        span.set_attribute("http.status_code", status)
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.StatusCode.ERROR, type(error).__name__)
    span.end()


@dataclass(frozen=True)
class ExecEvent:
    """One event of a streamed exec: `stdout`/`stderr` (with `data`) or `exit`."""

    type: str
    data: str = ""
    exit_code: int | None = None
    duration_ms: int | None = None
    timed_out: bool = False
    truncated: bool = False
    """On `exit`: output past `MAX_EXEC_OUTPUT` (of stdout or stderr) was dropped."""


@dataclass
class ExecResult:
    exit_code: int
    duration_ms: int
    timed_out: bool = False
    truncated: bool = False
    stdout: str = ""
    stderr: str = ""
    output: str = field(default="")  # stdout and stderr in arrival order


@dataclass(frozen=True)
class FileContent:
    path: str
    data: bytes
    size_bytes: int
    modified_at: str


@dataclass(frozen=True)
class FileStream:
    """A file as the agent sends it: what it says of the file, then the file's bytes as
    they come. `chunks` ends after exactly `size_bytes` bytes (the size when the file
    was opened); more, or fewer, is `AgentUnavailable` (the file shrank as it was read)."""

    path: str
    size_bytes: int
    modified_at: str
    chunks: AsyncGenerator[bytes, None]


@dataclass(frozen=True)
class ProcessOutput:
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    """What the stream wrote in all (more than kept when it was cut)."""


OnOutput = Callable[[ExecEvent], Awaitable[None]]
OnSent = Callable[[], Awaitable[None]]
"""Called once a request is on its way to the agent, before its answer is awaited: the
caller's work that need not come before it is then done while the agent runs."""


MAX_EXEC_OUTPUT = 10 << 20
"""The most of an exec's stdout, and of its stderr, that reaches the control plane (the
agent drops the rest, in the instance, and says so; so does this client, whatever the
agent does): an exec's answer is held whole, and one command must not fill the
node's memory."""
MAX_JSON_ANSWER = 64 << 20
"""The most of a JSON answer the control plane reads (a listing of some 400,000 files):
an instance's agent is the tenant's to replace, and must not fill the node's memory."""
FILE_RECEIVE_SIZE = 1 << 20
"""A file's bytes are read from the agent a megabyte at a time, as it sends them: a
sixteenth of the chunks every layer above handles one by one."""
MAX_ERROR_BODY = 1 << 16
"""An error answer is a small JSON document; more is not read."""


async def _gather(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body, up to `limit` bytes (what is past it is left unread)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


async def _exactly(chunks: AsyncGenerator[bytes, None], size: int) -> AsyncGenerator[bytes, None]:
    """`chunks`, which must come to `size` bytes in all."""
    seen = 0
    async with aclosing(chunks):
        async for chunk in chunks:
            seen += len(chunk)
            if seen > size:
                raise AgentUnavailable(f"the instance's agent sent more than the file's {size} bytes")
            yield chunk
    if seen < size:
        raise AgentUnavailable(f"the file shrank while it was read: {seen} of its {size} bytes came")


class _TransportError(Exception):
    """A failure on the wire; surfaces as AgentUnavailable."""


def _raise_for(status: int, body: bytes) -> None:
    if status < 400:
        return
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        raise AgentError(f"the instance's agent answered {status}", "AGENT_UNAVAILABLE", 502) from None
    if status == 401:
        raise AgentUnavailable("the instance's agent refused the control plane's token", detail=message)
    cls = AGENT_ERRORS.get(code)
    if cls is not None:
        raise cls(message)
    raise AgentError(message, code, status)


class _Connection:
    """One keep-alive HTTP/1.1 connection (h11 on a `DirectSocket`: no trip through the
    scheduler after a send or a read that did not need to wait)."""

    def __init__(self, sock: DirectSocket) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.CLIENT)
        self.used = False

    async def send(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> None:
        data = self.h11.send(h11.Request(method=method, target=target, headers=headers))
        if body:
            data += self.h11.send(h11.Data(data=body))
        data += self.h11.send(h11.EndOfMessage())
        await self.sock.send_all(data)

    async def next_event(self, receive_size: int = RECEIVE_SIZE) -> Any:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.sock.receive_some(receive_size))
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise _TransportError("the agent closed the connection")
            return event

    def ready_for_next(self) -> bool:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            with contextlib.suppress(h11.LocalProtocolError):
                self.h11.start_next_cycle()
                return True
        return False

    def close(self) -> None:
        self.sock.close()


class AgentClient:
    def __init__(self, address: str | None, port: int, token: str, timeout: float = 10.0) -> None:
        if not address:
            raise RuntimeUnavailable("the instance has no address yet")
        self.address = address
        self.port = port
        self.base_url = f"http://{address}:{port}"
        self.timeout = timeout
        self._headers = [("host", f"{address}:{port}"), ("authorization", f"Bearer {token}")]
        self._idle: list[_Connection] = []

    @classmethod
    def for_instance(cls, info: InstanceInfo, timeout: float = 10.0) -> AgentClient:
        if info.state is not InstanceState.RUNNING or not info.address:
            raise RuntimeUnavailable(f"instance {info.id} has no address (state {info.state.value})")
        return cls(info.address, info.agent_port, info.agent_token, timeout)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        await trio.lowlevel.checkpoint()

    # -- plumbing -------------------------------------------------------------

    async def _connect(self) -> _Connection:
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                return _Connection(await DirectSocket.connect(self.address, self.port))
        except (OSError, trio.TooSlowError) as exc:
            raise AgentUnavailable(NOT_ANSWERING, detail=f"agent at {self.base_url}: {exc!r}") from exc

    def _release(self, conn: _Connection) -> None:
        if len(self._idle) < MAX_IDLE and conn.ready_for_next():
            self._idle.append(conn)
        else:
            conn.close()

    async def _start(
        self, method: str, path: str, params: dict[str, Any] | None, body: bytes, content_type: str | None,
        on_sent: OnSent | None = None,
    ) -> tuple[_Connection, h11.Response]:
        """Send a request and read the response head, retrying once on a stale connection
        (`on_sent` is called once, after the first send that went out)."""
        target = path + ("?" + urlencode({k: v for k, v in params.items() if v is not None}) if params else "")
        headers = [*self._headers, ("content-length", str(len(body)))]
        if content_type:
            headers.append(("content-type", content_type))
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            try:
                await conn.send(method, target, headers, body)
                if on_sent is not None:
                    sent, on_sent = on_sent, None
                    await sent()
                event = await conn.next_event()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, _TransportError, h11.ProtocolError) as exc:
                conn.close()
                if reused:
                    continue  # the agent closed an idle connection (restart): try a fresh one
                raise AgentUnavailable(NOT_ANSWERING, detail=f"agent at {self.base_url}: {exc!r}") from exc
            except BaseException:
                conn.close()
                raise
            if not isinstance(event, h11.Response):
                conn.close()
                raise AgentUnavailable("the instance's agent answered something unexpected", detail=repr(event))
            return conn, event

    async def _body_chunks(
        self, conn: _Connection, read_timeout: float, receive_size: int = RECEIVE_SIZE
    ) -> AsyncGenerator[bytes, None]:
        """The response body as it arrives; the connection is released at its end.

        Timeouts are scoped around single reads, never around a `yield` (trio forbids that).
        """
        finished = False
        try:
            while True:
                try:
                    with trio.fail_after(read_timeout):
                        event = await conn.next_event(receive_size)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, _TransportError, h11.ProtocolError) as exc:
                    raise AgentUnavailable(
                        "the connection to the instance's agent broke", detail=f"agent at {self.base_url}: {exc!r}"
                    ) from exc
                except trio.TooSlowError as exc:
                    raise AgentUnavailable(
                        "the instance's agent stopped answering", detail=f"agent at {self.base_url}"
                    ) from exc
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    finished = True
                    return
        finally:
            if finished:
                self._release(conn)
            else:
                conn.close()

    async def _call(self, method: str, path: str, **kwargs: Any) -> tuple[h11.Response, bytes]:
        """`_exchange`, in a span when traces are recorded."""
        span = _start_span(method, path)
        if span is None:
            return await self._exchange(method, path, **kwargs)
        try:
            head, data = await self._exchange(method, path, **kwargs)
        except Exception as exc:
            _end_span(span, None, exc)
            raise
        except BaseException:
            _end_span(span, None)
            raise
        _end_span(span, head.status_code)
        return head, data

    async def _exchange(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json_body: dict[str, Any] | None = None,
        content: bytes | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> tuple[h11.Response, bytes]:
        """One request and its whole response; a body over `max_bytes` is AgentUnavailable."""
        body = content if content is not None else (json.dumps(json_body).encode() if json_body is not None else b"")
        content_type = "application/json" if json_body is not None else ("application/octet-stream" if content else None)
        limit = timeout if timeout is not None else self.timeout
        try:
            with trio.fail_after(limit):
                conn, head = await self._start(method, path, params, body, content_type)
                chunks: list[bytes] = []
                size = 0
                async with aclosing(self._body_chunks(conn, limit)) as received:
                    async for chunk in received:
                        size += len(chunk)
                        if max_bytes is not None and size > max_bytes:
                            raise AgentUnavailable("the instance's agent answered more than was asked for")
                        chunks.append(chunk)
        except trio.TooSlowError as exc:
            raise AgentUnavailable(
                f"the instance's agent did not answer within {limit:g} s", detail=f"agent at {self.base_url}"
            ) from exc
        data = b"".join(chunks)
        _raise_for(head.status_code, data)
        return head, data

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("max_bytes", MAX_JSON_ANSWER)
        _, data = await self._call(method, path, **kwargs)
        try:
            return dict(json.loads(data))
        except (ValueError, TypeError) as exc:
            raise AgentUnavailable("the instance's agent answered something that is not JSON") from exc

    async def _open_stream(
        self, method: str, path: str, params: dict[str, Any] | None, body: bytes, timeout: float,
        on_sent: OnSent | None = None, receive_size: int = RECEIVE_SIZE,
    ) -> tuple[h11.Response, AsyncGenerator[bytes, None]]:
        """A request whose answer's body is read as it comes: its head (within
        `timeout`) and its body's chunks (each within `STREAM_READ_TIMEOUT`); an error
        status is raised, its body read up to `MAX_ERROR_BODY`."""
        try:
            with trio.fail_after(timeout):
                conn, head = await self._start(method, path, params, body, "application/json" if body else None, on_sent)
        except trio.TooSlowError as exc:
            raise AgentUnavailable(
                f"the instance's agent did not answer within {timeout:g} s", detail=f"agent at {self.base_url}"
            ) from exc
        chunks = self._body_chunks(conn, STREAM_READ_TIMEOUT, receive_size)
        if head.status_code >= 400:
            async with aclosing(chunks):
                _raise_for(head.status_code, await _gather(chunks, MAX_ERROR_BODY))
        return head, chunks

    async def _ndjson(
        self, method: str, path: str, params: dict[str, Any] | None = None, json_body: dict[str, Any] | None = None,
        on_sent: OnSent | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Events of a newline-delimited JSON stream, heartbeats dropped; one span for
        the whole stream when traces are recorded (never made current: it spans yields)."""
        body = json.dumps(json_body).encode() if json_body is not None else b""
        span = _start_span(method, path)
        status: int | None = None
        failure: Exception | None = None
        try:
            head, chunks = await self._open_stream(method, path, params, body, self.timeout, on_sent)
            status = head.status_code
            async with aclosing(chunks):
                buffer = b""
                async for chunk in chunks:
                    buffer += chunk
                    if len(buffer) > MAX_JSON_ANSWER and b"\n" not in buffer:
                        raise AgentUnavailable("the instance's agent sent an event past the size allowed")
                    if b"\n" not in chunk:
                        continue
                    *lines, buffer = buffer.split(b"\n")  # once per chunk, not once per line
                    for line in lines:
                        if not line:
                            continue
                        try:
                            event = dict(json.loads(line))
                        except (ValueError, TypeError) as exc:
                            raise AgentUnavailable("the instance's agent sent an event that is not a JSON object") from exc
                        if event.get("type") != "heartbeat":
                            yield event
        except Exception as exc:
            failure = exc
            raise
        finally:
            _end_span(span, status, failure)

    # -- health ---------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return await self._json("GET", "/health")

    async def warm(self) -> None:
        """Open a kept-alive connection and have the agent answer once on it (`/health`),
        unless one is already open and idle: a new agent's first request is its slowest."""
        if not self._idle:
            await self.health()

    async def wait_ready(self, timeout: float = 10.0) -> dict[str, Any]:
        """Poll /health until the agent answers (after a restart of the agent)."""
        with trio.move_on_after(timeout):
            while True:
                try:
                    return await self.health()
                except AgentUnavailable:
                    await trio.sleep(0.05)
        raise AgentUnavailable(
            f"the instance's agent was not ready after {timeout:g} s", detail=f"agent at {self.base_url}"
        )

    # -- exec -----------------------------------------------------------------

    async def exec_stream(
        self,
        command: str,
        timeout: float = 30.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        combined: bool = False,
        on_sent: OnSent | None = None,
    ) -> AsyncGenerator[ExecEvent, None]:
        """Events as the command produces them; the last one has type `exit`.

        Iterate it under `contextlib.aclosing` if you may stop early. The agent
        kills the command (SIGTERM, then SIGKILL) once `timeout` has passed. Of each
        of stdout and stderr, `MAX_EXEC_OUTPUT` characters at most come through; the
        exit event says whether more was dropped (`truncated`).
        """
        body = {
            "command": command, "timeout": timeout, "cwd": cwd, "env": env or {}, "combined": combined,
            "output_limit": MAX_EXEC_OUTPUT,
        }
        room = {"stdout": MAX_EXEC_OUTPUT, "stderr": MAX_EXEC_OUTPUT}
        truncated = False
        final: ExecEvent | None = None
        async with aclosing(self._ndjson("POST", "/exec", json_body=body, on_sent=on_sent)) as events:
            # Read to the end of the body even after the exit event, so the
            # connection goes back to the pool instead of being closed.
            async for event in events:
                kind = event.get("type")
                if kind == "error":
                    code = str(event.get("code"))
                    cls = AGENT_ERRORS.get(code)
                    message = str(event.get("message"))
                    raise cls(message) if cls else AgentError(message, code)
                if kind == "exit":
                    try:
                        final = ExecEvent(
                            "exit",
                            exit_code=int(event["exit_code"]),
                            duration_ms=int(event["duration_ms"]),
                            timed_out=bool(event.get("timed_out")),
                            truncated=truncated or bool(event.get("truncated")),
                        )
                    except (KeyError, TypeError, ValueError) as exc:
                        raise AgentUnavailable(f"the instance's agent answered an exit without its status: {exc!r}") from exc
                elif final is None and kind in room:
                    data = str(event.get("data", ""))
                    if len(data) > room[kind]:  # an agent that did not cut it (an old or a foreign one)
                        data, truncated = data[: room[kind]], True
                    room[kind] -= len(data)
                    if data:
                        yield ExecEvent(kind, data=data)
        if final is None:
            raise AgentUnavailable("exec stream ended without an exit status")
        yield final

    async def exec(
        self,
        command: str,
        timeout: float = 30.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        combined: bool = False,
        on_output: OnOutput | None = None,
        on_sent: OnSent | None = None,
    ) -> ExecResult:
        """Run to completion; `on_output` sees each stdout/stderr event as it arrives,
        `on_sent` is called once the command is on its way (`OnSent`)."""
        stdout: list[str] = []
        stderr: list[str] = []
        output: list[str] = []
        async with aclosing(self.exec_stream(command, timeout, cwd, env, combined, on_sent)) as events:
            async for event in events:
                if event.type == "exit":
                    return ExecResult(
                        exit_code=event.exit_code if event.exit_code is not None else -1,
                        duration_ms=event.duration_ms or 0,
                        timed_out=event.timed_out,
                        truncated=event.truncated,
                        stdout="".join(stdout),
                        stderr="".join(stderr),
                        output="".join(output),
                    )
                (stderr if event.type == "stderr" else stdout).append(event.data)
                output.append(event.data)
                if on_output is not None:
                    await on_output(event)
        raise AgentUnavailable("exec stream ended without an exit status")

    # -- files ----------------------------------------------------------------

    async def open_file(self, path: str, timeout: float = 120.0) -> FileStream:
        """`path` to be read as a stream, never held whole (a download of any size): the
        answer's head within `timeout`, each part of the body within
        `STREAM_READ_TIMEOUT`. Iterate `chunks` under `aclosing`: the connection goes
        back to the pool at its end."""
        span = _start_span("GET", "/files/read")
        status: int | None = None
        try:
            head, chunks = await self._open_stream("GET", "/files/read", {"path": path}, b"", timeout, receive_size=FILE_RECEIVE_SIZE)
            status = head.status_code
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers}
            try:
                size = int(headers["x-file-size"])
            except (KeyError, ValueError):
                await chunks.aclose()
                raise AgentUnavailable("the instance's agent answered a file without its size") from None
        except Exception as exc:
            _end_span(span, status, exc)
            raise
        _end_span(span, status)
        return FileStream(
            path=unquote(headers["x-file-path"]) if "x-file-path" in headers else path,
            size_bytes=size,
            modified_at=headers.get("x-file-modified-at", ""),
            chunks=_exactly(chunks, size),
        )

    async def read_file(self, path: str, timeout: float = 120.0, max_bytes: int | None = None) -> FileContent:
        """The whole file, read within `timeout`; one over `max_bytes` is `FileTooLarge`
        before any of it is read."""
        try:
            with trio.fail_after(timeout):
                stream = await self.open_file(path, timeout)
                async with aclosing(stream.chunks):
                    if max_bytes is not None and stream.size_bytes > max_bytes:
                        raise FileTooLarge(f"{stream.path} is {stream.size_bytes} bytes, more than the {max_bytes} allowed here")
                    data = b"".join([chunk async for chunk in stream.chunks])
        except trio.TooSlowError as exc:
            raise AgentUnavailable(
                f"the instance's agent did not send {path} within {timeout:g} s", detail=f"agent at {self.base_url}"
            ) from exc
        return FileContent(path=stream.path, data=data, size_bytes=stream.size_bytes, modified_at=stream.modified_at)

    async def write_file(self, path: str, data: bytes, parents: bool = True, timeout: float = 120.0) -> dict[str, Any]:
        params = {"path": path, "parents": "1" if parents else "0"}
        return await self._json("PUT", "/files/write", params=params, content=data, timeout=timeout)

    async def list_files(self, path: str = "/workspace") -> dict[str, Any]:
        return await self._json("GET", "/files/list", params={"path": path})

    async def stat(self, path: str) -> dict[str, Any]:
        return await self._json("GET", "/files/stat", params={"path": path})

    async def mkdir(self, path: str, recursive: bool = False) -> dict[str, Any]:
        return await self._json("POST", "/files/mkdir", json_body={"path": path, "recursive": recursive})

    async def rename(self, source: str, destination: str) -> dict[str, Any]:
        return await self._json("POST", "/files/rename", json_body={"source": source, "destination": destination})

    async def copy(self, source: str, destination: str) -> dict[str, Any]:
        return await self._json("POST", "/files/copy", json_body={"source": source, "destination": destination})

    async def chmod(self, path: str, mode: str) -> dict[str, Any]:
        return await self._json("POST", "/files/chmod", json_body={"path": path, "mode": mode})

    async def delete(self, path: str) -> dict[str, Any]:
        return await self._json("POST", "/files/delete", json_body={"path": path}, timeout=120.0)

    # -- background processes -------------------------------------------------

    async def spawn(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
        process_id: str | None = None,
        stdin: str | None = None,
        capture: int = 0,
    ) -> dict[str, Any]:
        """Start `cmd` under /bin/sh -c; `process_id` (a `proc_` id) is the caller's to choose.
        `stdin` is fed to it; the first `capture` bytes of stdout and stderr are kept (`output`)."""
        body: dict[str, Any] = {"cmd": cmd, "cwd": cwd, "env": env or {}, "name": name, "id": process_id}
        if stdin is not None:
            body["stdin"] = stdin
        if capture:
            body["capture"] = capture
        return await self._json("POST", "/processes", json_body=body)

    async def output(self, process_id: str) -> ProcessOutput:
        """The bytes a process spawned with `capture` kept, and how many it wrote in all."""
        body = await self._json("GET", f"/processes/{process_id}/output")
        return ProcessOutput(
            stdout=base64.b64decode(body["stdout"]),
            stderr=base64.b64decode(body["stderr"]),
            stdout_bytes=int(body["stdout_bytes"]),
            stderr_bytes=int(body["stderr_bytes"]),
        )

    async def processes(self) -> list[dict[str, Any]]:
        return list((await self._json("GET", "/processes"))["processes"])

    async def process(self, process_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/processes/{process_id}")

    async def kill(self, process_id: str, grace: float = 5.0) -> dict[str, Any]:
        """SIGTERM to the process group, SIGKILL after `grace`; answers the final record."""
        return await self._json("DELETE", f"/processes/{process_id}", params={"grace": grace}, timeout=grace + 10)

    async def logs(self, process_id: str, tail: int = 200) -> dict[str, Any]:
        """`{"lines": [{id, ts, stream, line}], "process", "next"}`: the last `tail` lines."""
        return await self._json("GET", f"/processes/{process_id}/logs", params={"tail": tail})

    async def logs_after(self, process_id: str, after: int, wait: float = 0.0) -> dict[str, Any]:
        """Lines after sequence `after`, waiting up to `wait` seconds for some (long-poll)."""
        params = {"after": after, "wait": wait}
        return await self._json("GET", f"/processes/{process_id}/logs", params=params, timeout=wait + 10)

    # -- terminals ------------------------------------------------------------

    async def open_terminal(self, cols: int, rows: int, shell: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        """A shell on a PTY of `cols` x `rows`: `{session_id, shell, cols, rows, pid, attached}`."""
        body = {"cols": cols, "rows": rows, "shell": shell, "env": env or {}}
        return await self._json("POST", "/terminals", json_body=body)

    async def terminal(self, session_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/terminals/{session_id}")

    async def resize_terminal(self, session_id: str, cols: int, rows: int) -> dict[str, Any]:
        return await self._json("POST", f"/terminals/{session_id}/resize", json_body={"cols": cols, "rows": rows})

    async def close_terminal(self, session_id: str) -> dict[str, Any]:
        return await self._json("DELETE", f"/terminals/{session_id}")

    # -- desktop (the agent's persistent X connection: corral.vm.agent.xdisplay) ----

    async def desktop_input(self, display: str, steps: list[dict[str, Any]], timeout: float = 15.0) -> dict[str, Any]:
        """Run input steps on the display; the agent answers where the pointer is afterwards."""
        body = {"display": display, "steps": steps}
        _, data = await self._call("POST", "/desktop/input", json_body=body, timeout=timeout, max_bytes=1 << 16)
        try:
            return dict(json.loads(data))
        except (ValueError, TypeError) as exc:
            raise AgentUnavailable("the instance's agent answered something that is not JSON") from exc

    async def desktop_screen(
        self, display: str, box: tuple[int, int, int, int] | None, max_bytes: int, timeout: float = 15.0
    ) -> bytes:
        """The agent's PNG of the screen (or of `box` = x, y, width, height); a body over
        `max_bytes` is AgentUnavailable."""
        params: dict[str, Any] = {"display": display}
        if box is not None:
            params.update(zip(("x", "y", "width", "height"), box, strict=True))
        _, data = await self._call("GET", "/desktop/screen", params=params, timeout=timeout, max_bytes=max_bytes)
        return data

    async def stream_logs(self, process_id: str, after: int = 0) -> AsyncGenerator[dict[str, Any], None]:
        """`{"type": "log", id, ts, stream, line}` events, then `{"type": "end", process}`."""
        async with aclosing(self._ndjson("GET", f"/processes/{process_id}/stream", params={"after": after})) as events:
            async for event in events:
                yield event
