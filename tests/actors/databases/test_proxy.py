"""The connection proxy's protocol handling (`corral.net.pgproxy`), with fake hooks and a
fake upstream: what it answers to TLS requests, what it refuses, what it relays."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest
import trio

from corral.net.pgproxy import DatabaseProxy, ProxyRefusal
from corral.net.pgproxy.protocol import (
    PROTOCOL_3,
    SSL_REQUEST,
    ProtocolError,
    error_response,
    parse,
)
from tests.support import free_port


def startup(user: str, database: str = "app") -> bytes:
    body = struct.pack("!I", PROTOCOL_3) + b"user\x00" + user.encode() + b"\x00database\x00" + database.encode() + b"\x00\x00"
    return struct.pack("!I", len(body) + 4) + body


class Hooks:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.asked: list[dict[str, str]] = []
        self.home: tuple[str, int] | None = None

    async def upstream(self, database_id: str, params: dict[str, str]) -> str:
        self.asked.append(params)
        if params.get("user") != "owner":
            raise ProxyRefusal("28000", "role is not permitted")
        return self.socket_path

    async def cancel_upstream(self, database_id: str) -> str | None:
        return None

    async def elsewhere(self, database_id: str) -> tuple[str, int] | None:
        return self.home


async def tcp_echo(port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Another node's proxy, as far as a relay can tell: it echoes what it is sent."""

    async def echo(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some(65536):
            await stream.send_all(b"home:" + data)

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    task_status.started()
    await trio.serve_listeners(echo, listeners)


async def echo_server(path: Path, received: list[bytes], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(str(path))
    listener.listen()
    task_status.started()
    while True:
        conn, _ = await listener.accept()
        with conn:
            while data := await conn.recv(65536):
                received.append(data)
                await conn.send(b"echo:" + data)


def test_parse_and_error_response() -> None:
    packet = startup("owner")
    parsed = parse(packet)
    assert parsed.params == {"user": "owner", "database": "app"}
    with pytest.raises(ProtocolError):
        parse(struct.pack("!II", 8, 2 << 16))
    error = error_response("28000", "nope")
    assert error[:1] == b"E" and b"C28000\x00" in error and b"Mnope\x00" in error


async def test_tls_is_declined_the_startup_forwarded_and_bytes_relayed(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    received: list[bytes] = []
    proxy = DatabaseProxy()
    hooks = Hooks(str(sock))
    proxy.hooks = hooks
    port = free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(echo_server, sock, received)
        await nursery.start(proxy.run)
        await proxy.listen("db1", port, ("127.0.0.1",))
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            await client.send_all(struct.pack("!II", 8, SSL_REQUEST))
            assert await client.receive_some(1) == b"N"
            await client.send_all(startup("owner"))
            await client.send_all(b"Q-select")
            data = b""
            with trio.fail_after(5):
                while b"Q-select" not in data:
                    data += await client.receive_some(1024)
            assert proxy.open_connections("db1") == 1
        with trio.fail_after(5):
            while proxy.open_connections("db1"):
                await trio.sleep(0.01)
        assert b"".join(received).startswith(startup("owner"))
        assert hooks.asked[0]["user"] == "owner"
        assert proxy.idle_seconds("db1") >= 0
        nursery.cancel_scope.cancel()


async def test_a_refused_client_gets_an_error_response(tmp_path: Path) -> None:
    proxy = DatabaseProxy()
    proxy.hooks = Hooks(str(tmp_path / "none"))
    port = free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        await proxy.listen("db1", port, ("127.0.0.1",))
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            await client.send_all(startup("intruder"))
            answer = b""
            with trio.fail_after(5):
                while True:
                    chunk = await client.receive_some(1024)
                    if not chunk:
                        break
                    answer += chunk
        assert answer.startswith(b"E") and b"C28000" in answer and b"not permitted" in answer
        # a closed database stops accepting
        proxy.close("db1")
        await trio.sleep(0.05)
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)
        nursery.cancel_scope.cancel()


async def test_garbage_is_dropped_without_an_upstream(tmp_path: Path) -> None:
    proxy = DatabaseProxy()
    hooks = Hooks(str(tmp_path / "none"))
    proxy.hooks = hooks
    port = free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        await proxy.listen("db1", port, ("127.0.0.1",))
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            await client.send_all(b"GET / HTTP/1.1\r\n\r\n")
            with trio.fail_after(5), contextlib.suppress(trio.BrokenResourceError):  # a reset: nothing sent either
                assert await client.receive_some(1024) == b""
        assert hooks.asked == []
        nursery.cancel_scope.cancel()


async def test_another_nodes_database_is_relayed_as_is_and_its_port_changes_hands_at_once(tmp_path: Path) -> None:
    """A database another node runs: the connection's bytes go to that node's proxy as
    they are (no startup read here: the home admits it); when the home is unknown the
    client gets an error response. A relay replaced by the database's own listener (it
    moved here) frees the port at once, so the new listener binds it."""
    proxy = DatabaseProxy()
    hooks = Hooks(str(tmp_path / "none"))
    proxy.hooks = hooks
    port, home_port = free_port(), free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(tcp_echo, home_port)
        await nursery.start(proxy.run)
        hooks.home = ("127.0.0.1", home_port)
        assert await proxy.listen("db1", port, ("127.0.0.1",), relay=True) == ("127.0.0.1",)
        assert proxy.relayed() == {"db1": (port, ("127.0.0.1",))}
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            await client.send_all(b"not even a startup packet")
            data = b""
            with trio.fail_after(5):
                while b"home:not even a startup packet" not in data:
                    data += await client.receive_some(1024)
        assert hooks.asked == []  # admitted by the home, not here

        hooks.home = None
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            with trio.fail_after(5):
                answer = await client.receive_some(1024)
        assert answer.startswith(b"E") and b"moving between nodes" in answer

        assert await proxy.listen("db1", port, ("127.0.0.1",)) == ("127.0.0.1",)  # its own now: bound at once
        assert proxy.relayed() == {}
        nursery.cancel_scope.cancel()
