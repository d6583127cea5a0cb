"""`DatabaseProxy`: one TCP port per managed database, in front of its server's socket.

Why a proxy at all: a database with `auto_suspend_seconds` is stopped when idle, and
the next client must be served in the same connection. Why not a library (pgbouncer,
a Python pooler): none of them wakes a stopped server from inside the connection,
and pooling would change session semantics the tenant relies on. What the proxy
must do is small: read the startup packet (refusing TLS with `N`, as a server
without TLS does), ask the hooks for the server's socket (they wake it and check
that the user is the database's own role), send the packet on, and relay bytes both
ways. That is a plain trio relay, written here.

The proxy counts each database's open connections and when the last one ended:
the auto-suspend watcher asks it (`idle_since`). It never imports the actors: the
hooks are handed to it (`DatabaseProxyHooks`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Protocol

import trio

from .protocol import (
    CANCEL_REQUEST,
    GSSENC_REQUEST,
    SSL_REQUEST,
    ProtocolError,
    Startup,
    error_response,
    header_length,
    parse,
)

log = logging.getLogger("corral.net.pgproxy")

CHUNK = 256 * 1024
STARTUP_TIMEOUT = 30.0


class ProxyRefusal(Exception):
    """The hooks refuse the connection: sent to the client as a FATAL ErrorResponse."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message


class DatabaseProxyHooks(Protocol):
    async def upstream(self, database_id: str, params: dict[str, str]) -> str:
        """The server's socket path for a client with these startup parameters (waking
        the database when suspended); raise `ProxyRefusal` to refuse it."""

    async def cancel_upstream(self, database_id: str) -> str | None:
        """The socket path for a CancelRequest, only if the server runs (never wakes it)."""

    async def elsewhere(self, database_id: str) -> tuple[str, int] | None:
        """Where the proxy of a database another node runs accepts its clients (host,
        port); None when it is no longer another node's."""


@dataclass
class _Usage:
    open: int = 0
    last_closed: float = field(default_factory=time.monotonic)
    connections: int = 0


class DatabaseProxy:
    def __init__(self, hooks: DatabaseProxyHooks | None = None) -> None:
        self.hooks = hooks
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[str, trio.CancelScope] = {}
        self._bound: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._usage: dict[str, _Usage] = {}
        self._relayed: set[str] = set()
        self._listeners: dict[str, list[trio.SocketListener]] = {}
        """Databases another node runs, whose connections are relayed there as they come."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- what the node asks -------------------------------------------------------------------

    def listening(self, database_id: str) -> tuple[int, tuple[str, ...]] | None:
        return self._bound.get(database_id)

    def relayed(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """The databases this proxy relays to another node, and where it listens for each."""
        return {database_id: self._bound[database_id] for database_id in self._relayed if database_id in self._bound}

    async def listen(self, database_id: str, port: int, hosts: tuple[str, ...], *, relay: bool = False) -> tuple[str, ...]:
        """Accept connections for the database on `port` at each of `hosts` (again with the
        hosts given now, if it listened before); returns the hosts it could bind. With
        `relay`, the database is another node's: each connection is passed, bytes as
        they are, to its proxy there (`DatabaseProxyHooks.elsewhere`), which admits,
        wakes and serves it."""
        assert self._nursery is not None, "the proxy is not running"
        if self._bound.get(database_id) == (port, hosts) and (database_id in self._relayed) == relay:
            return hosts
        self.close(database_id)
        if relay:
            self._relayed.add(database_id)
        listeners: list[trio.SocketListener] = []
        bound = []
        for host in hosts:
            try:
                listeners.extend(await trio.open_tcp_listeners(port, host=host, backlog=512))
                bound.append(host)
            except OSError as exc:
                log.warning("database %s: cannot listen on %s:%d: %s", database_id, host, port, exc)
        scope = trio.CancelScope()
        self._scopes[database_id] = scope
        self._listeners[database_id] = listeners
        self._bound[database_id] = (port, hosts)
        self._usage.setdefault(database_id, _Usage())

        async def handler(stream: trio.SocketStream) -> None:
            await self._serve(database_id, stream)

        async def serve() -> None:
            with scope, contextlib.suppress(trio.ClosedResourceError):  # closed by `close`
                await trio.serve_listeners(handler, listeners)

        self._nursery.start_soon(serve)
        return tuple(bound)

    def close(self, database_id: str) -> None:
        """Stop accepting and end every connection of the database."""
        scope = self._scopes.pop(database_id, None)
        if scope is not None:
            scope.cancel()
        for listener in self._listeners.pop(database_id, []):
            listener.socket.close()  # the port is free at once (a listen that follows binds it again)
        self._bound.pop(database_id, None)
        self._relayed.discard(database_id)

    def forget(self, database_id: str) -> None:
        self.close(database_id)
        self._usage.pop(database_id, None)

    def open_connections(self, database_id: str) -> int:
        usage = self._usage.get(database_id)
        return 0 if usage is None else usage.open

    def idle_seconds(self, database_id: str) -> float:
        """Seconds since the last connection ended (0 while one is open)."""
        usage = self._usage.get(database_id)
        if usage is None:
            return 0.0
        return 0.0 if usage.open else time.monotonic() - usage.last_closed

    def mark_active(self, database_id: str) -> None:
        """Restart the idle clock (the database just started)."""
        self._usage.setdefault(database_id, _Usage()).last_closed = time.monotonic()

    # -- one connection --------------------------------------------------------------------------

    async def _serve(self, database_id: str, client: trio.abc.Stream) -> None:
        scope = self._scopes.get(database_id)
        usage = self._usage.setdefault(database_id, _Usage())
        usage.open += 1
        usage.connections += 1
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError, OSError):
                await self._handle(database_id, client)
        finally:
            usage.open -= 1
            usage.last_closed = time.monotonic()
            with contextlib.suppress(Exception):
                await trio.aclose_forcefully(client)
        del scope

    async def _handle(self, database_id: str, client: trio.abc.Stream) -> None:
        if database_id in self._relayed:
            await self._relay(database_id, client)
            return
        with trio.fail_after(STARTUP_TIMEOUT):
            startup = await _read_startup(client)
            while startup.code in (SSL_REQUEST, GSSENC_REQUEST):
                await client.send_all(b"N")
                startup = await _read_startup(client)
        hooks = self.hooks
        if hooks is None:
            await client.send_all(error_response("57P03", "the database service is starting"))
            return
        if startup.code == CANCEL_REQUEST:
            path = await hooks.cancel_upstream(database_id)
            if path is not None:
                upstream = await trio.open_unix_socket(path)
                async with upstream:
                    await upstream.send_all(startup.raw)
            return
        try:
            path = await hooks.upstream(database_id, startup.params)
        except ProxyRefusal as refusal:
            await client.send_all(error_response(refusal.sqlstate, refusal.message))
            return
        try:
            upstream = await trio.open_unix_socket(path)
        except OSError:
            await client.send_all(error_response("57P03", "the database server is not accepting connections"))
            return
        _no_delay(client)
        async with upstream:
            await upstream.send_all(startup.raw)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pipe, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_pipe, upstream, client, nursery.cancel_scope)


    async def _relay(self, database_id: str, client: trio.abc.Stream) -> None:
        """Pass the connection to the proxy of the node that runs the database."""
        where = await self.hooks.elsewhere(database_id) if self.hooks is not None else None
        if where is None:
            await client.send_all(error_response("57P03", "the database is moving between nodes; connect again"))
            return
        try:
            with trio.fail_after(STARTUP_TIMEOUT):
                upstream = await trio.open_tcp_stream(*where)
        except (OSError, trio.TooSlowError):
            await client.send_all(error_response("57P03", "the node that runs the database cannot be reached"))
            return
        _no_delay(client)
        _no_delay(upstream)
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, client, upstream, nursery.cancel_scope)
            nursery.start_soon(_pipe, upstream, client, nursery.cancel_scope)


def _no_delay(stream: trio.abc.Stream) -> None:
    if not isinstance(stream, trio.SocketStream):
        return
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


async def _read_exactly(stream: trio.abc.ReceiveStream, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = await stream.receive_some(count - len(data))
        if not chunk:
            raise ProtocolError("the client closed the connection during startup")
        data += chunk
    return bytes(data)


async def _read_startup(stream: trio.abc.ReceiveStream) -> Startup:
    header = await _read_exactly(stream, 4)
    body = await _read_exactly(stream, header_length(header) - 4)
    return parse(header + body)


async def _pipe(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, scope: trio.CancelScope) -> None:
    """Copy until either side ends; then the whole relay ends."""
    try:
        while True:
            data = await source.receive_some(CHUNK)
            if not data:
                break
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()
