"""An in-process authoritative DNS server on loopback (dnslib over trio UDP) for tests.

`records` maps names to CNAME targets; a name starting with `*.` is a wildcard that
answers any name below it (the longest match wins, as an explicit wildcard does in
a real zone). `addresses` maps names to IPv4 addresses (A records, TTL `ttl`).
Names it does not know are NXDOMAIN. With `silent = True` it
answers nothing, to test timeouts.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio
from dnslib import CNAME, QTYPE, RCODE, RR, A, DNSRecord


class DnsServer:
    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self.addresses: dict[str, list[str]] = {}
        self.ttl = 60
        self.silent = False
        self.port = 0
        self.queries: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def lookup(self, name: str) -> str | None:
        name = name.lower().rstrip(".")
        if name in self.records:
            return self.records[name]
        best: tuple[int, str] | None = None
        for pattern, target in self.records.items():
            below = pattern.startswith("*.") and name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
            if below and (best is None or len(pattern) > best[0]):
                best = (len(pattern), target)
        return best[1] if best else None

    def answer(self, data: bytes) -> bytes | None:
        query = DNSRecord.parse(data)
        name = str(query.q.qname)
        self.queries.append(name.rstrip("."))
        reply = query.reply()
        addresses = self.addresses.get(name.lower().rstrip("."))
        if addresses is not None:
            if query.q.qtype in (QTYPE.A, QTYPE.ANY):
                for address in addresses:
                    reply.add_answer(RR(query.q.qname, QTYPE.A, rdata=A(address), ttl=self.ttl))
            return bytes(reply.pack())
        target = self.lookup(name)
        if target is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif query.q.qtype in (QTYPE.CNAME, QTYPE.A, QTYPE.ANY):
            reply.add_answer(RR(query.q.qname, QTYPE.CNAME, rdata=CNAME(target + "."), ttl=60))
        return bytes(reply.pack())

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        task_status.started()
        with sock:
            while True:
                data, peer = await sock.recvfrom(4096)
                if self.silent:
                    continue
                response = self.answer(data)
                if response is not None:
                    await sock.sendto(response, peer)


@contextlib.asynccontextmanager
async def dns_server() -> AsyncIterator[DnsServer]:
    server = DnsServer()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()
