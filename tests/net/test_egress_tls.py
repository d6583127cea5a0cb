"""The proxy's TLS stream (`corral.net.egress.tls`): big reads over many records, limits,
both kinds of EOF, and a refused certificate that says why."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trio

from corral.net.egress import EgressCA
from corral.net.egress.tls import TLSStream

HOST = "relay.example"


async def pair(tmp_path: Path, *, trust: bool = True) -> tuple[TLSStream, TLSStream]:
    """A client and a server over a socket pair, handshakes not yet made."""
    ca = EgressCA(tmp_path / "ca")
    left, right = trio.socket.socketpair()
    client_context = ssl.create_default_context(cafile=str(ca.cert_path)) if trust else ssl.create_default_context()
    client = TLSStream(trio.SocketStream(left), client_context, server_side=False, server_hostname=HOST)
    server = TLSStream(trio.SocketStream(right), ca.context_for(HOST), server_side=True)
    return client, server


async def handshake(client: TLSStream, server: TLSStream) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        nursery.start_soon(server.do_handshake)


async def test_many_records_come_back_in_one_read(tmp_path: Path) -> None:
    client, server = await pair(tmp_path)
    await handshake(client, server)
    payload = os.urandom(3 * 1024 * 1024 + 5)
    got = bytearray()
    sizes: list[int] = []

    async def read() -> None:
        while len(got) < len(payload):
            data = await client.receive_some()
            assert data
            sizes.append(len(data))
            got.extend(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await server.send_all(payload)
    assert bytes(got) == payload
    assert max(sizes) > 16384  # more than one TLS record per call
    await client.aclose()
    await server.aclose()


async def test_max_bytes_is_the_most_returned(tmp_path: Path) -> None:
    client, server = await pair(tmp_path)
    await handshake(client, server)
    await server.send_all(b"y" * 100_000)
    got = bytearray()
    while len(got) < 100_000:
        data = await client.receive_some(1000)
        assert 0 < len(data) <= 1000
        got.extend(data)
    assert client.buffered == 0
    with pytest.raises(ValueError):
        await client.receive_some(0)


async def test_close_notify_and_a_bare_close_both_read_as_the_end(tmp_path: Path) -> None:
    client, server = await pair(tmp_path)
    await handshake(client, server)
    await server.send_all(b"last words")
    await server.aclose()  # close_notify, then the socket
    assert await client.receive_some() == b"last words"
    assert await client.receive_some() == b""

    client, server = await pair(tmp_path / "again")
    await handshake(client, server)
    await server.send_all(b"cut")
    await server.transport.aclose()  # no close_notify: the HTTP framing says if a body was whole
    assert await client.receive_some() == b"cut"
    assert await client.receive_some() == b""
    await client.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await client.receive_some()


async def test_a_refused_certificate_says_why_to_both_sides(tmp_path: Path) -> None:
    client, server = await pair(tmp_path, trust=False)
    server_saw: list[BaseException] = []

    async def serve() -> None:
        try:
            await server.do_handshake()
        except trio.BrokenResourceError as exc:
            server_saw.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        with pytest.raises(trio.BrokenResourceError) as refused:
            await client.do_handshake()
    assert isinstance(refused.value.__cause__, ssl.SSLCertVerificationError)
    assert "unknown ca" in str(server_saw[0].__cause__).lower()  # the alert went out
