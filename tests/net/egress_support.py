"""Helpers of the egress proxy tests: an echo server (HTTP or HTTPS), a recording hook."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h11
import trio

from corral.net.egress import (
    AllowAll,
    AuditEntry,
    Decision,
    EgressCA,
    Headers,
    RequestInfo,
    ResponseScrubber,
    Transform,
)
from corral.net.preview.upstream import socket_in_netns
from tests.support import TEST_SLOT


@dataclass
class EchoServer:
    """Answers every request with JSON: method, target, headers, body size and the peer's address."""

    host: str
    port: int = 0
    tls: ssl.SSLContext | None = None
    peers: list[str] = field(default_factory=list)
    big: int = 0
    """`GET /big` answers this many bytes (`GET /big/<n>`: n bytes)."""
    connections: int = 0
    """Connections accepted so far (a kept-alive upstream is counted once)."""
    netns: str | None = None
    """A network namespace (path) to listen in, instead of the host's."""

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        if self.netns is not None:
            plain = await trio.to_thread.run_sync(socket_in_netns, self.netns, family)
            listener = trio.socket.from_stdlib_socket(plain)
        else:
            listener = trio.socket.socket(family)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        task_status.started(self.port)
        async with trio.open_nursery() as nursery:
            while True:
                sock, address = await listener.accept()
                nursery.start_soon(self._connection, sock, str(address[0]))

    async def _connection(self, sock: trio.socket.SocketType, peer: str) -> None:
        self.connections += 1
        stream: trio.abc.Stream = trio.SocketStream(sock)
        try:
            if self.tls is not None:
                stream = trio.SSLStream(stream, self.tls, server_side=True)
                await stream.do_handshake()
            conn = h11.Connection(h11.SERVER)
            while True:
                request = None
                size = 0
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(bytes(await stream.receive_some(65536)))
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        size += len(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert request is not None
                self.peers.append(peer)
                if request.target == b"/big" or request.target.startswith(b"/big/"):
                    size = int(request.target[5:]) if request.target.startswith(b"/big/") else self.big
                    await self._big(stream, conn, size)
                else:
                    body = json.dumps({
                        "method": request.method.decode(),
                        "target": request.target.decode(),
                        "headers": {k.decode(): v.decode() for k, v in request.headers},
                        "body_size": size,
                        "peer": peer,
                    }).encode()
                    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
                    await stream.send_all(conn.send(h11.Data(data=body)) or b"")
                    await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, h11.ProtocolError, OSError):
            return
        finally:
            await stream.aclose()

    async def _big(self, stream: trio.abc.Stream, conn: h11.Connection, size: int) -> None:
        headers = [(b"content-length", str(size).encode())]
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        chunk = b"x" * 65536
        left = size
        while left:
            piece = chunk[: min(left, len(chunk))]
            await stream.send_all(conn.send(h11.Data(data=piece)) or b"")
            left -= len(piece)
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")


@asynccontextmanager
async def echo_server(
    host: str = "127.0.0.1", tls: ssl.SSLContext | None = None, big: int = 0, port: int = 0, netns: str | None = None
) -> AsyncIterator[EchoServer]:
    server = EchoServer(host, port, tls=tls, big=big, netns=netns)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


INTERNET_HOST = f"10.220.{TEST_SLOT}.1"
INTERNET = f"10.220.{TEST_SLOT}.2"
"""The test's stand-in for the internet: a namespace with this address, HTTP on 80, HTTPS on 443."""


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


def server_tls(directory: Path) -> tuple[ssl.SSLContext, str]:
    """The internet server's TLS: a CA of its own (the proxy is given it as CORRAL_CA_BUNDLE); leaves by SNI."""
    test_ca = EgressCA(directory)
    context = test_ca.context_for(INTERNET)

    def by_name(sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: ssl.SSLContext) -> None:
        if name:
            sslobj.context = test_ca.context_for(name)

    context.sni_callback = by_name
    return context, str(test_ca.cert_path)


@asynccontextmanager
async def internet(tmp_path: Path) -> AsyncIterator[str]:
    """The internet namespace, linked to the host by a veth, with its servers; yields its CA file.

    Its names match no runtime's prefixes, so a node's start-up cleanup leaves them alone.
    """
    netns = f"egress-internet{TEST_SLOT}"
    outside, inside = f"egrinet{TEST_SLOT}", f"egrinetp{TEST_SLOT}"
    subprocess.run(["ip", "netns", "delete", netns], capture_output=True)
    subprocess.run(["ip", "link", "delete", outside], capture_output=True)
    try:
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns)
        sh("ip", "addr", "add", f"{INTERNET_HOST}/24", "dev", outside)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "-n", netns, "addr", "add", f"{INTERNET}/24", "dev", inside)
        sh("ip", "-n", netns, "link", "set", inside, "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "-n", netns, "route", "add", "default", "via", INTERNET_HOST)
        tls, bundle = server_tls(tmp_path / "internet-ca")
        path = f"/run/netns/{netns}"
        async with echo_server(INTERNET, port=80, netns=path), echo_server(INTERNET, port=443, netns=path, tls=tls):
            yield bundle
    finally:
        subprocess.run(["ip", "link", "delete", outside], capture_output=True)
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


class Recording(AllowAll):
    """Allow-all hooks that keep every audit entry, and can deny hosts or rewrite a header."""

    def __init__(self, deny: Sequence[str] = (), replace: tuple[bytes, bytes] | None = None) -> None:
        self.entries: list[AuditEntry] = []
        self.deny = set(deny)
        self.replace = replace

    async def decide(self, info: RequestInfo) -> Decision:
        if info.host in self.deny:
            return Decision(allow=False, rejected_by="rule:test", message=f"{info.host} is denied")
        return Decision()

    async def transform_headers(self, info: RequestInfo, headers: Headers) -> tuple[Headers, Sequence[Transform]]:
        if self.replace is None:
            return headers, ()
        old, new = self.replace
        changed = [(k, v.replace(old, new)) for k, v in headers]
        transforms = [Transform("placeholder", k.decode()) for (k, v), (_, w) in zip(headers, changed, strict=True) if v != w]
        return changed, transforms

    def scrub_response(self, info: RequestInfo, headers: Headers) -> tuple[Headers, ResponseScrubber | None]:
        if self.replace is None:
            return headers, None
        return headers, _Swap(self.replace[1], self.replace[0])

    async def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)

    async def wait(self, count: int) -> list[AuditEntry]:
        """The entries once there are `count` (a request's row comes just after its last byte)."""
        with trio.fail_after(5):
            while len(self.entries) < count:
                await trio.sleep(0.01)
        return self.entries


class _Swap:
    """A scrubber without hold-back (the test bodies come in one piece)."""

    def __init__(self, old: bytes, new: bytes) -> None:
        self.old = old
        self.new = new

    def feed(self, data: bytes) -> bytes:
        return data.replace(self.old, self.new)

    def finish(self) -> bytes:
        return b""
