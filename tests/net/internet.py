"""A stand-in for the internet: a network namespace with servers, routed from the host.

`internet()` makes netns `policy-internet<slot>` joined to the host by a veth pair
(`198.18.<slot>.1` on the host, `.10` and `.11` inside, from the benchmarking range),
and runs in it a small server on each of `PORTS` (TCP: it answers
`hello <address>:<port>` and closes; UDP: it echoes the same). Instances reach it
through the host's forwarding and NAT, as they would reach the internet.

`probe(netns, address, port, protocol)` tries it from another namespace (an
instance's) and says whether the server answered.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.support import TEST_SLOT

PORTS = (8080, 9090)
SERVER = """
import socket, sys, threading
def tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, _ = s.accept()
        c.sendall(("hello %s:%d" % (c.getsockname()[0], port)).encode()); c.close()
def udp(address, port):  # bound to the address, so that the reply comes from it
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((address, port))
    while True:
        data, peer = s.recvfrom(100)
        s.sendto(b"hello udp", peer)
for p in map(int, sys.argv[2:]):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
    for a in sys.argv[1].split(","):
        threading.Thread(target=udp, args=(a, p), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""
PROBE = """
import socket, sys
address, port, protocol = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    if protocol == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
        s.sendto(b"hi", (address, port)); print(s.recv(100).decode())
    else:
        s = socket.create_connection((address, port), timeout=1.5); print(s.recv(100).decode())
except OSError as exc:
    print("refused", exc)
"""


@dataclass(frozen=True)
class Internet:
    netns: str
    host_address: str
    addresses: tuple[str, str]


def _sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


@contextlib.contextmanager
def internet() -> Iterator[Internet]:
    netns = f"policy-internet{TEST_SLOT}"
    host_link, inner_link = f"tinet{TEST_SLOT}", f"tinetp{TEST_SLOT}"
    net = f"198.18.{TEST_SLOT}"
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    subprocess.run(["ip", "link", "del", host_link], capture_output=True)
    _sh("ip", "netns", "add", netns)
    server = None
    try:
        _sh("ip", "link", "add", host_link, "type", "veth", "peer", "name", inner_link)
        _sh("ip", "link", "set", inner_link, "netns", netns)
        _sh("ip", "addr", "add", f"{net}.1/24", "dev", host_link)
        _sh("ip", "link", "set", host_link, "up")
        for suffix in ("10", "11"):
            _sh("ip", "-n", netns, "addr", "add", f"{net}.{suffix}/24", "dev", inner_link)
        _sh("ip", "-n", netns, "link", "set", inner_link, "up")
        _sh("ip", "-n", netns, "link", "set", "lo", "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", SERVER, f"{net}.10,{net}.11", *map(str, PORTS)],
            stdout=subprocess.PIPE, text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield Internet(netns, f"{net}.1", (f"{net}.10", f"{net}.11"))
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def probe(netns: str, address: str, port: int, protocol: str = "tcp") -> bool:
    """Whether a server at address:port answered from inside `netns`."""
    result = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", PROBE, address, str(port), protocol],
        capture_output=True, text=True, timeout=10,
    )
    return result.stdout.startswith("hello")


def wait_for(predicate: object, timeout: float = 1.0) -> bool:
    """Poll a no-argument callable until true or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():  # type: ignore[operator]
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
