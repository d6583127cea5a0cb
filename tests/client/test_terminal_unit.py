"""The blocking terminal client's WebSocket handling, against a minimal wsproto server
(a unit test of the client's framing; the real terminals are in test_client_runtime)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request

from corral.client import CorralError, Terminal
from corral.client.terminal import connect_address
from corral.commands import computers
from corral.commands.computers import _interact


def _serve_once(listener: socket.socket, first_bytes_with_accept: bytes | None, refuse: bool = False) -> None:
    conn, _ = listener.accept()
    ws = WSConnection(ConnectionType.SERVER)
    while True:
        ws.receive_data(conn.recv(65536))
        if any(isinstance(event, Request) for event in ws.events()):
            break
    if refuse:
        body = b'{"error":{"code":"UNAUTHORIZED","message":"bad token","request_id":"req_1"}}'
        head = f"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body)
        conn.close()
        return
    out = ws.send(AcceptConnection())
    if first_bytes_with_accept is not None:
        out += ws.send(BytesMessage(data=first_bytes_with_accept))
    conn.sendall(out)  # the 101 and the first output in one segment
    conn.recv(65536)
    conn.close()


def _listener() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    return listener, listener.getsockname()[1]


def test_output_that_arrives_with_the_handshake_is_not_lost() -> None:
    listener, port = _listener()
    server = threading.Thread(target=_serve_once, args=(listener, b"root@box:~# "), daemon=True)
    server.start()
    with Terminal(f"ws://box.corral.localhost:{port}/terminal/s1?auth=t") as term:
        assert term.read_until(b"# ", timeout=60) == b"root@box:~# "  # a hang guard
    listener.close()


def test_a_refused_upgrade_is_the_servers_error() -> None:
    listener, port = _listener()
    threading.Thread(target=_serve_once, args=(listener, None, True), daemon=True).start()
    with pytest.raises(CorralError) as caught:
        Terminal(f"ws://127.0.0.1:{port}/terminal/s1?auth=wrong")
    assert (caught.value.status, caught.value.code, caught.value.request_id) == (401, "UNAUTHORIZED", "req_1")
    listener.close()


def test_localhost_names_are_loopback() -> None:
    assert connect_address("abc.corral.localhost") == "127.0.0.1"
    assert connect_address("LOCALHOST.") == "127.0.0.1"
    assert connect_address("example.com") == "example.com"
    assert connect_address("example.com", "10.0.0.1") == "10.0.0.1"


def _shell_once(listener: socket.socket, seen: list[bytes]) -> None:
    """A shell whose prompt rides with the 101; it echoes what it is sent, and closes
    the session at `exit`."""
    conn, _ = listener.accept()
    ws = WSConnection(ConnectionType.SERVER)
    asked = False
    while not asked:
        ws.receive_data(conn.recv(65536))
        asked = any(isinstance(event, Request) for event in ws.events())
    conn.sendall(ws.send(AcceptConnection()) + ws.send(BytesMessage(data=b"$ ")))
    received = b""
    while b"exit" not in received:
        data = conn.recv(65536)
        if not data:
            break
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, BytesMessage):
                received += bytes(event.data)
                conn.sendall(ws.send(BytesMessage(data=bytes(event.data))))
    seen.append(received)
    conn.sendall(ws.send(CloseConnection(code=1000)))
    conn.close()


def test_piped_input_is_sent_when_the_prompt_came_with_the_handshake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener, port = _listener()
    seen: list[bytes] = []
    threading.Thread(target=_shell_once, args=(listener, seen), daemon=True).start()
    stdin = tmp_path / "stdin"
    stdin.write_bytes(b"echo hi\nexit\n")
    # Far longer than any machine needs: input sent within it was sent because the prompt
    # had come, not because the wait ran out (the 5 s default a slow machine can pass).
    monkeypatch.setattr(computers, "PROMPT_WAIT", 120.0)
    with open(stdin, "rb") as piped, Terminal(f"ws://127.0.0.1:{port}/terminal/s1?auth=t") as term:
        monkeypatch.setattr(sys, "stdin", piped)
        started = time.monotonic()
        _interact(term)
    assert seen == [b"echo hi\nexit\n"]
    assert time.monotonic() - started < computers.PROMPT_WAIT  # sent at once: the prompt was already there
    listener.close()
