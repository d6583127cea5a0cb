"""Terminals: a computer's shell on a PTY over a WebSocket (contract §10).

`POST /computers/{id}/terminal` answers a `ws_url` on the computer's host at the
preview router, already carrying `?auth=<stream token>`. The socket carries the
PTY's bytes both ways; a text frame `{"type": "resize", "cols": C, "rows": R}`
resizes it. `Terminal` is a blocking client (a socket and wsproto, so the CLI needs
no event loop); `AsyncTerminal` runs under trio (trio-websocket).

Host names under `.localhost` are loopback (RFC 6761) but the system resolver often
does not know them: such a URL is reached at 127.0.0.1 with its own Host header,
as browsers do. `connect_to` overrides the address for any other name.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, wrap_client_stream
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from .errors import CorralConnectionError, CorralError

__all__ = ["AsyncTerminal", "Terminal", "connect_address", "open_async_terminal"]


def connect_address(host: str, connect_to: str | None = None) -> str:
    """Where to open the TCP connection for `host`."""
    if connect_to:
        return connect_to
    lowered = host.lower().rstrip(".")
    if lowered == "localhost" or lowered.endswith(".localhost"):
        return "127.0.0.1"
    return host


def _target(url: str) -> tuple[str, str, int, str, bool]:
    """(host, netloc, port, path?query, tls) of a ws:// or wss:// URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"not a WebSocket URL: {url}")
    tls = parts.scheme == "wss"
    port = parts.port or (443 if tls else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return parts.hostname, parts.netloc, port, target, tls


def _resize_frame(cols: int, rows: int) -> str:
    return json.dumps({"type": "resize", "cols": cols, "rows": rows})


class Terminal:
    """A blocking terminal session: `send` input, `recv` output, `resize`, `close`."""

    def __init__(self, ws_url: str, *, connect_to: str | None = None, timeout: float = 30.0) -> None:
        host, netloc, port, target, tls = _target(ws_url)
        try:
            sock = socket.create_connection((connect_address(host, connect_to), port), timeout=timeout)
        except OSError as error:
            raise CorralConnectionError(f"terminal {netloc}: {error}") from error
        if tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        self._sock = sock
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._pending: list[bytes] = []
        self._partial = b""
        self.closed = False
        self._sock.sendall(self._ws.send(Request(host=netloc, target=target)))
        self._handshake(netloc)

    def _handshake(self, netloc: str) -> None:
        status, body = 0, b""
        while True:
            data = self._sock.recv(65536)
            if not data:
                raise CorralConnectionError(f"terminal {netloc}: the connection closed during the handshake")
            self._ws.receive_data(data)
            accepted = False
            for event in self._ws.events():
                if isinstance(event, AcceptConnection):
                    accepted = True  # and keep going: output may have come in the same bytes
                elif isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise _refused(status, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        raise _refused(status, body)
                else:
                    self._handle(event)
            if accepted:
                return

    def _handle(self, event: object) -> None:
        if isinstance(event, BytesMessage | TextMessage):
            chunk = event.data if isinstance(event, BytesMessage) else event.data.encode()
            self._partial += chunk
            if event.message_finished:
                self._pending.append(self._partial)
                self._partial = b""
        elif isinstance(event, Ping):
            self._sock.sendall(self._ws.send(event.response()))
        elif isinstance(event, CloseConnection) and not self.closed:
            self.closed = True
            with suppress(OSError):  # the peer may already be gone
                self._sock.sendall(self._ws.send(event.response()))

    def send(self, data: bytes | str) -> None:
        """Input for the shell (bytes as a binary frame, text as a text frame)."""
        message: Message[Any] = BytesMessage(data=data) if isinstance(data, bytes) else TextMessage(data=data)
        self._sock.sendall(self._ws.send(message))

    def resize(self, cols: int, rows: int) -> None:
        self.send(_resize_frame(cols, rows))

    def recv(self, timeout: float | None = None) -> bytes | None:
        """The output received so far (at least one message), or None when the session
        closed; `TimeoutError` after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self.closed:
                return None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining == 0.0:
                raise TimeoutError("no terminal output in time")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise TimeoutError("no terminal output in time") from None
            if not data:
                self.closed = True
                return None
            self._ws.receive_data(data)
            for event in self._ws.events():
                self._handle(event)
        output, self._pending = b"".join(self._pending), []  # a byte stream: everything received so far
        return output

    def read_until(self, needle: bytes, timeout: float = 10.0) -> bytes:
        """Everything received until `needle` appears (TimeoutError otherwise)."""
        seen = b""
        deadline = time.monotonic() + timeout
        while needle not in seen:
            chunk = self.recv(timeout=max(0.0, deadline - time.monotonic()))
            if chunk is None:
                break
            seen += chunk
        if needle not in seen:
            raise TimeoutError(f"{needle!r} did not appear")
        return seen

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with suppress(OSError):
                self._sock.sendall(self._ws.send(CloseConnection(code=1000)))
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def buffered(self) -> bool:
        """Output already received (e.g. with the handshake's bytes) that `recv` will give
        without reading the socket: a `select` on `fileno()` would not report it."""
        return bool(self._pending) or self.closed

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refused(status: int, body: bytes) -> CorralError:
    try:
        error = json.loads(body)["error"]
        return CorralError(str(error["code"]), str(error["message"]), status=status, request_id=error.get("request_id"))
    except (ValueError, KeyError, TypeError):
        return CorralError(f"HTTP_{status}", body.decode("utf-8", "replace") or "refused", status=status)


class AsyncTerminal:
    """A terminal session under trio."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws

    async def send(self, data: bytes | str) -> None:
        await self._ws.send_message(data)

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send_message(_resize_frame(cols, rows))

    async def recv(self) -> bytes | None:
        """The next output, or None once the session closed."""
        try:
            message = await self._ws.get_message()
        except ConnectionClosed:
            return None
        return message if isinstance(message, bytes) else message.encode()

    async def read_until(self, needle: bytes, timeout: float = 10.0) -> bytes:
        seen = b""
        with trio.fail_after(timeout):
            while needle not in seen:
                chunk = await self.recv()
                if chunk is None:
                    raise TimeoutError(f"the session closed before {needle!r}")
                seen += chunk
        return seen


@asynccontextmanager
async def open_async_terminal(ws_url: str, *, connect_to: str | None = None) -> AsyncIterator[AsyncTerminal]:
    host, netloc, port, target, tls = _target(ws_url)
    async with trio.open_nursery() as nursery:
        try:
            tcp = await trio.open_tcp_stream(connect_address(host, connect_to), port)
        except OSError as error:
            raise CorralConnectionError(f"terminal {netloc}: {error}") from error
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = tcp
        if tls:
            stream = trio.SSLStream(tcp, ssl.create_default_context(), server_hostname=host)
        try:
            ws = await wrap_client_stream(nursery, stream, netloc, target)
        except HandshakeError as error:
            status = getattr(error, "status_code", 0)
            raise _refused(status, getattr(error, "body", b"") or b"") from error
        try:
            yield AsyncTerminal(ws)
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()
