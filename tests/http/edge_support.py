"""Helpers for the TLS edge tests: a node with `corral serve --edge`'s Caddy, HTTPS requests
by name to a loopback port (SNI and Host set to the name), the served certificate."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from corral.net.edge import edge_config
from corral.node import run_edge
from tests.dns_server import DnsServer
from tests.http.domain_support import domain_server
from tests.support import Api, free_port


@contextlib.asynccontextmanager
async def edge_server(tmp_path_factory: pytest.TempPathFactory, **overrides: Any) -> AsyncIterator[tuple[Api, DnsServer]]:
    """A node running real instances and its edge on free ports (`edge_https_port`, `edge_http_port`)."""
    settings: dict[str, Any] = {"edge_https_port": free_port(), "edge_http_port": free_port(), **overrides}
    async with domain_server(tmp_path_factory, **settings) as (api, dns), trio.open_nursery() as nursery:
        with trio.fail_after(60):
            await nursery.start(run_edge, api.platform.settings)
        yield api, dns
        nursery.cancel_scope.cancel()


def trusting(*roots: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=None)
    context.load_default_certs()
    for root in roots:
        context.load_verify_locations(cafile=str(root))
    return context


async def https_get(api: Api, name: str, roots: ssl.SSLContext, path: str = "/", **headers: str) -> httpx.Response:
    """GET https://{name}{path} through the edge's HTTPS port on loopback, verifying the certificate for `name`."""
    port = api.platform.settings.edge_https_port
    async with httpx.AsyncClient(verify=roots, timeout=30, follow_redirects=False) as client:
        return await client.get(
            f"https://127.0.0.1:{port}{path}", headers={"Host": name, **headers}, extensions={"sni_hostname": name}
        )


async def served_certificate(api: Api, name: str, roots: ssl.SSLContext) -> dict[str, Any]:
    """The certificate the edge presents for `name` (verified against `roots`)."""
    port = api.platform.settings.edge_https_port
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(tcp, roots, server_hostname=name)
    try:
        await stream.do_handshake()
        cert = stream.getpeercert()
        assert cert is not None
        return dict(cert)
    finally:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.aclose()


def names_in(cert: dict[str, Any]) -> set[str]:
    return {value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"}


def issuer_of(cert: dict[str, Any]) -> str:
    return " ".join(value for rdn in cert["issuer"] for _, value in rdn)


def caddy_pids(api: Api) -> list[int]:
    """The edge's caddy processes (their command line names this node's config file)."""
    config = str(edge_config(api.platform.settings).storage / "caddy.json")
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if config in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
    return found


async def wss_first_frame(api: Api, name: str, roots: ssl.SSLContext, target: str, cookie: str) -> tuple[int, bytes]:
    """A WebSocket upgrade of `target` on `name` through the edge (TLS); the status and,
    after a 101, the payload of the server's first (short, binary) frame."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {target} HTTP/1.1\r\nHost: {name}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\nCookie: {cookie}\r\n\r\n"
    )
    tcp = await trio.open_tcp_stream("127.0.0.1", api.platform.settings.edge_https_port)
    stream = trio.SSLStream(tcp, roots, server_hostname=name)
    async with stream:
        await stream.send_all(head.encode())
        data = b""
        with trio.fail_after(20):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                assert chunk, data
                data += chunk
            response_head, _, rest = data.partition(b"\r\n\r\n")
            status = int(response_head.split(b"\r\n", 1)[0].split(b" ", 2)[1])
            if status != 101:
                return status, rest
            while len(rest) < 2:
                rest += await stream.receive_some(65536)
            length = rest[1] & 0x7F
            while len(rest) < 2 + length:
                rest += await stream.receive_some(65536)
            return status, rest[2 : 2 + length]
