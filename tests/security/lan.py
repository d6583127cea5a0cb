"""A node's private network, as a tenant would find it: a namespace holding addresses of
every private range (RFC 1918 and CGNAT), routed from the host over a veth, with a
TCP and UDP server on each of `PORTS` (`tests.net.internet.SERVER`: `hello <address>:<port>`).

`probe_all` is a script a sandbox runs to try many destinations at once; it prints
`{"<protocol>:<host>:<port>": "hello ..." | "refused: <why>"}`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import trio

from tests.net.internet import SERVER
from tests.support import TEST_SLOT, free_port

PORTS = (6379, 8080)
"""Neither 80 nor 443: what the egress proxy does not see."""
NETWORKS = (f"10.221.{TEST_SLOT}", f"172.29.{TEST_SLOT}", f"192.168.{220 + TEST_SLOT}", f"100.64.{220 + TEST_SLOT}")
"""One /24 of each private range: RFC 1918's three and CGNAT (100.64.0.0/10)."""
LINK_LOCAL = f"169.254.{100 + TEST_SLOT}"
"""A link-local /24 on the same link (a metadata service would live in this range)."""

PROBE_ALL = r"""
import json, socket, sys, threading
found = {}
def probe(protocol, host, port):
    key = "%s:%s:%d" % (protocol, host, port)
    try:
        if protocol == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
            s.sendto(b"hi", (host, port)); found[key] = s.recv(100).decode()
        else:
            s = socket.create_connection((host, port), timeout=2); s.settimeout(2)
            found[key] = s.recv(100).decode() or "connected"
    except OSError as exc:
        found[key] = "refused: %s" % (exc.strerror or exc)
threads = [threading.Thread(target=probe, args=tuple(t)) for t in json.loads(sys.argv[1])]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(found))
"""

OWN_ADDRESS = (
    "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
    " s.connect(('192.0.2.1', 9)); print(s.getsockname()[0])\""
)
"""Prints the sandbox's own address (no packet is sent)."""
GATEWAY = "awk '/^nameserver/ {print $2}' /etc/resolv.conf"
"""Prints the node's address on the instances' bridge (where its DNS forwarder listens)."""


@dataclass(frozen=True)
class Lan:
    netns: str
    host_addresses: tuple[str, ...]
    """The node's own address on each of the LAN's networks."""
    addresses: tuple[str, ...]
    """The LAN's servers, one in each private range."""
    link_local: str
    """The LAN's server at a link-local address."""


def _sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


@contextlib.contextmanager
def lan() -> Iterator[Lan]:
    netns = f"sec-lan{TEST_SLOT}"
    outside, inside = f"seclan{TEST_SLOT}", f"seclanp{TEST_SLOT}"
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    subprocess.run(["ip", "link", "del", outside], capture_output=True)
    server = None
    try:
        _sh("ip", "netns", "add", netns)
        _sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns)
        for net in (*NETWORKS, LINK_LOCAL):
            _sh("ip", "addr", "add", f"{net}.1/24", "dev", outside)
            _sh("ip", "-n", netns, "addr", "add", f"{net}.10/24", "dev", inside)
        _sh("ip", "link", "set", outside, "up")
        _sh("ip", "-n", netns, "link", "set", inside, "up")
        _sh("ip", "-n", netns, "link", "set", "lo", "up")
        addresses = tuple(f"{net}.10" for net in NETWORKS)
        link_local = f"{LINK_LOCAL}.10"
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", SERVER, ",".join((*addresses, link_local)), *map(str, PORTS)],
            stdout=subprocess.PIPE, text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield Lan(netns, tuple(f"{net}.1" for net in NETWORKS), addresses, link_local)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", outside], capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def host_reaches(address: str, port: int) -> str:
    """What the host itself gets from address:port (the LAN is really there)."""
    with socket.create_connection((address, port), timeout=2) as conn:
        return conn.recv(100).decode()


def default_route_address() -> str:
    """The node's address on the interface of its default route (its "public" one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))
        return str(sock.getsockname()[0])


@contextlib.asynccontextmanager
async def host_listener() -> AsyncIterator[int]:
    """A service of the node on every address (0.0.0.0), answering `hello-host`; yields its port."""
    port = free_port()

    async def answer(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(b"hello-host")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_tcp, answer, port)
        yield port
        nursery.cancel_scope.cancel()


def targets(*items: tuple[str, str, int]) -> str:
    """`probe_all`'s argument."""
    return json.dumps([list(item) for item in items])
