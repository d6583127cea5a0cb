"""The agent's HTTP API: routing, token check, and the process that runs it.

Every request must carry `Authorization: Bearer <token>`; the token is compared in
constant time. Bodies are JSON except file contents, which travel as raw bytes.
Streams (exec output, process logs) are newline-delimited JSON in a chunked body.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import trio

from . import files
from .errors import AgentError
from .execution import base_environment, check_runnable, execute
from .httpserver import Request, Response, Send, json_response, serve
from .processes import ProcessTable
from .services import start_services
from .terminals import Terminals
from .websocket import WebSocket, accept_key
from .xdisplay import DesktopRoutes

MAX_TIMEOUT = 3600.0
HEARTBEAT = 15.0


@dataclass
class AgentConfig:
    """What the launcher hands the agent: where to listen and who may talk to it."""

    address: str
    port: int
    token: str
    hostname: str = "instance"
    env: dict[str, str] = field(default_factory=dict)


def ndjson(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


LOG_ANSWER_BUDGET = 32 << 20
"""The most one answer of log lines carries, in JSON (10,000 lines of 16,384 characters
would be 160 MB and more): the control plane reads at most 64 MiB of an answer."""


def _within_budget(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leading `entries` whose JSON together fits `LOG_ANSWER_BUDGET` (at least one)."""
    used = 0
    for count, entry in enumerate(entries):
        used += len(json.dumps(entry)) + 2
        if used > LOG_ANSWER_BUDGET and count:
            return entries[:count]
    return entries


class Agent:
    """Routes requests to the operations; owns the process table."""

    def __init__(self, config: AgentConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self.base_env = base_environment(config.env, config.hostname)
        self.processes = ProcessTable(nursery, self.base_env)
        self.terminals = Terminals(nursery, self.base_env)
        self.started = time.time()
        self._token = config.token.encode()
        self.desktop = DesktopRoutes()
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Awaitable[Response]]]] = [
            ("GET", re.compile(r"/health"), self.health),
            ("POST", re.compile(r"/exec"), self.exec),
            ("GET", re.compile(r"/files/read"), self.read_file),
            ("PUT", re.compile(r"/files/write"), self.write_file),
            ("GET", re.compile(r"/files/list"), self.list_files),
            ("GET", re.compile(r"/files/stat"), self.stat_file),
            ("POST", re.compile(r"/files/(mkdir|rename|copy|chmod|delete)"), self.file_op),
            ("POST", re.compile(r"/processes"), self.spawn),
            ("GET", re.compile(r"/processes"), self.list_processes),
            ("GET", re.compile(r"/processes/([\w-]+)"), self.get_process),
            ("DELETE", re.compile(r"/processes/([\w-]+)"), self.kill_process),
            ("GET", re.compile(r"/processes/([\w-]+)/logs"), self.process_logs),
            ("GET", re.compile(r"/processes/([\w-]+)/output"), self.process_output),
            ("GET", re.compile(r"/processes/([\w-]+)/stream"), self.process_stream),
            ("POST", re.compile(r"/terminals"), self.open_terminal),
            ("GET", re.compile(r"/terminals/(\w+)"), self.get_terminal),
            ("DELETE", re.compile(r"/terminals/(\w+)"), self.close_terminal),
            ("POST", re.compile(r"/terminals/(\w+)/resize"), self.resize_terminal),
            ("GET", re.compile(r"/terminals/(\w+)/ws"), self.terminal_socket),
            ("POST", re.compile(r"/desktop/input"), self.desktop.input),
            ("GET", re.compile(r"/desktop/screen"), self.desktop.screen),
        ]

    async def handle(self, request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        presented = auth[7:].encode() if auth.startswith("Bearer ") else b""
        if not hmac.compare_digest(presented, self._token):
            raise AgentError(401, "UNAUTHORIZED", "invalid agent token")
        path_matched = False
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            path_matched = True
            if method == request.method:
                try:
                    return await handler(request, *match.groups())
                except OSError as exc:
                    if not request.path.startswith("/files/"):
                        raise
                    # A failure the files module has no name for (a full disk, an
                    # entry that cannot be removed): said, not a dropped connection.
                    what = request.path.removeprefix("/files/")
                    raise AgentError(400, "INVALID_PATH", f"cannot {what}: {exc.strerror or exc}") from exc
        if path_matched:
            raise AgentError(405, "METHOD_NOT_ALLOWED", f"{request.method} not allowed here")
        raise AgentError(404, "NOT_FOUND", f"no route {request.path}")

    # -- health ---------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return json_response(
            {
                "status": "ok",
                "hostname": self.config.hostname,
                "uptime_s": round(time.time() - self.started, 3),
                "pid": os.getpid(),
            }
        )

    # -- exec -----------------------------------------------------------------

    async def exec(self, request: Request) -> Response:
        body = request.json()
        command = body.get("command")
        if not isinstance(command, str) or not command:
            raise AgentError(400, "MISSING_PARAM", "command is required")
        timeout = min(float(body.get("timeout") or 30), MAX_TIMEOUT)
        cwd = body.get("cwd") or "/workspace"
        env = dict(self.base_env)
        env.update({str(k): str(v) for k, v in (body.get("env") or {}).items()})
        combined = bool(body.get("combined", False))
        limit = body.get("output_limit")
        output_limit = limit if isinstance(limit, int) and limit >= 0 else None
        # Check what can be checked before the 200 goes out, so it is a proper error status.
        check_runnable(command, env)
        if not os.path.isdir(cwd):
            raise AgentError(500, "PROCESS_START_FAILED", f"working directory does not exist: {cwd}")

        async def writer(send: Send) -> None:
            async def emit(event: dict[str, Any]) -> None:
                await send(ndjson(event))

            try:
                final = await execute(command, cwd, env, timeout, emit, combined, output_limit)
            except AgentError as exc:
                final = {"type": "error", "code": exc.code, "message": exc.message}
            await send(ndjson(final), final=True)

        return Response(200, headers={"content-type": "application/x-ndjson"}, writer=writer)

    # -- terminals ------------------------------------------------------------

    async def open_terminal(self, request: Request) -> Response:
        body = request.json()
        env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        shell = body.get("shell") or "/bin/bash"
        if not isinstance(shell, str):
            raise AgentError(422, "VALIDATION_ERROR", "shell must be a path")
        terminal = await self.terminals.open(body.get("cols", 80), body.get("rows", 24), shell, env)
        return json_response(terminal.to_json(), 201)

    async def get_terminal(self, request: Request, session_id: str) -> Response:
        return json_response(self.terminals.get(session_id).to_json())

    async def close_terminal(self, request: Request, session_id: str) -> Response:
        self.terminals.close(session_id)
        return json_response({"session_id": session_id, "closed": True})

    async def resize_terminal(self, request: Request, session_id: str) -> Response:
        body = request.json()
        return json_response(self.terminals.resize(session_id, body.get("cols"), body.get("rows")).to_json())

    async def terminal_socket(self, request: Request, session_id: str) -> Response:
        terminal = self.terminals.get(session_id)
        key = request.headers.get("sec-websocket-key")
        if request.headers.get("upgrade", "").lower() != "websocket" or not key:
            raise AgentError(400, "NOT_A_WEBSOCKET", "this is a WebSocket endpoint")

        async def bridge(stream: trio.SocketStream, buffered: bytes) -> None:
            await self.terminals.attach(terminal, WebSocket(stream, buffered))

        headers = {"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-accept": accept_key(key)}
        return Response(101, headers=headers, upgraded=bridge)

    # -- files ----------------------------------------------------------------

    async def read_file(self, request: Request) -> Response:
        resolved, fd, st = files.open_for_read(request.query.get("path"))

        async def writer(send: Send) -> None:
            # The size it had when opened, no more: a file that grows as it is read
            # (a log, `yes > f`, a sparse file made larger) does not make the answer endless.
            left = st.st_size
            try:
                while left > 0:
                    chunk = os.read(fd, min(1 << 20, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    await send(chunk)
            finally:
                os.close(fd)

        headers = {
            "content-type": "application/octet-stream",
            "x-file-path": quote(os.fsencode(resolved), safe="/"),  # any name, as ASCII
            "x-file-size": str(st.st_size),
            "x-file-modified-at": files.iso(st.st_mtime),
        }
        return Response(200, headers=headers, writer=writer)

    async def write_file(self, request: Request) -> Response:
        parents = request.query.get("parents", "1") not in ("0", "false")
        result = files.write_file(request.query.get("path"), request.body, parents)
        return json_response(result, 201)

    async def list_files(self, request: Request) -> Response:
        return json_response(files.list_directory(request.query.get("path")))

    async def stat_file(self, request: Request) -> Response:
        return json_response(files.stat_path(request.query.get("path")))

    async def file_op(self, request: Request, op: str) -> Response:
        body = request.json()
        if op == "mkdir":
            result = files.make_directory(body.get("path"), bool(body.get("recursive", False)))
        elif op == "rename":
            result = files.rename(body.get("source"), body.get("destination"))
        elif op == "copy":
            result = await trio.to_thread.run_sync(files.copy, body.get("source"), body.get("destination"))
        elif op == "chmod":
            result = files.chmod(body.get("path"), body.get("mode"))
        else:
            result = await trio.to_thread.run_sync(files.delete, body.get("path"))
        return json_response(result)

    # -- processes ------------------------------------------------------------

    async def spawn(self, request: Request) -> Response:
        body = request.json()
        cmd = body.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise AgentError(400, "MISSING_PARAM", "cmd is required")
        env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        record = await self.processes.spawn(
            cmd,
            cwd=body.get("cwd") or "/workspace",
            env=env,
            name=body.get("name"),
            process_id=body.get("id"),
            stdin=body.get("stdin") if isinstance(body.get("stdin"), str) else None,
            capture=int(body.get("capture") or 0),
        )
        return json_response(record.to_json(), 201)

    async def list_processes(self, request: Request) -> Response:
        return json_response({"processes": [p.to_json() for p in self.processes.list()]})

    async def get_process(self, request: Request, process_id: str) -> Response:
        return json_response(self.processes.get(process_id).to_json())

    async def kill_process(self, request: Request, process_id: str) -> Response:
        grace = float(request.query.get("grace") or 5)
        record = await self.processes.kill(process_id, grace)
        return json_response(record.to_json())

    async def process_logs(self, request: Request, process_id: str) -> Response:
        record = self.processes.get(process_id)
        if "after" in request.query:
            wait = min(float(request.query.get("wait") or 0), 60.0)
            entries = [entry.to_json() for entry in await record.wait_after(int(request.query["after"]), wait)]
            entries = _within_budget(entries)  # the earliest: `next` goes on from the last
        else:
            entries = [entry.to_json() for entry in record.tail(int(request.query.get("tail") or 200))]
            entries = _within_budget(entries[::-1])[::-1]  # the newest
        return json_response(
            {
                "lines": entries,
                "process": record.to_json(),
                "next": entries[-1]["id"] if entries else int(request.query.get("after") or 0),
            }
        )

    async def process_output(self, request: Request, process_id: str) -> Response:
        return json_response(self.processes.get(process_id).output())

    async def process_stream(self, request: Request, process_id: str) -> Response:
        record = self.processes.get(process_id)
        after = int(request.query.get("after") or 0)

        async def writer(send: Send) -> None:
            seq = after
            while True:
                lines = await record.wait_after(seq, HEARTBEAT)
                for entry in lines:
                    await send(ndjson({"type": "log", **entry.to_json()}))
                    seq = entry.seq
                if record.finished and not record.after(seq):
                    await send(ndjson({"type": "end", "process": record.to_json()}), final=True)
                    return
                if not lines:
                    await send(ndjson({"type": "heartbeat"}))

        return Response(200, headers={"content-type": "application/x-ndjson"}, writer=writer)


async def open_listener(address: str, port: int) -> trio.SocketListener:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await sock.bind((address, port))
    sock.listen(128)
    return trio.SocketListener(sock)


async def run(config: AgentConfig, ready_fd: int | None = None, gate: int | None = None) -> None:
    """Serve until killed; write a line to `ready_fd` once the port accepts connections
    (and `gate`, a pipe's read end, has reached its end: PID 1 is in place)."""
    listener = await open_listener(config.address, config.port)
    async with trio.open_nursery() as nursery:
        agent = Agent(config, nursery)
        await start_services(agent.processes)
        if gate is not None:
            await trio.lowlevel.wait_readable(gate)
            trio.lowlevel.notify_closing(gate)
            os.close(gate)
        if ready_fd is not None:
            os.write(ready_fd, ndjson({"ready": True, "agent_pid": os.getpid()}))
            os.close(ready_fd)
        await serve([listener], agent.handle)
