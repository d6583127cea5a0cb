"""`DatabaseNode`: this node's database servers, their proxy, and who may reach them.

One object the node builds (`corral.node`) and every database actor reaches as
`services.databases`: the servers' runtime (`corral.vm.postgres.PostgresDriver`),
the connection proxy (`corral.net.pgproxy`), the nftables set of instance/port
pairs, the hosts clients use, and the proxy ports this node hands out.
"""

from __future__ import annotations

import collections
import socket
from dataclasses import dataclass, field
from typing import Any

from corral.net.pgproxy import DatabaseAccess, DatabaseProxy
from corral.vm.postgres import PostgresDriver

SAMPLES = 120
"""cgroup samples kept per database for `cpu_percent` and `memory_percent`."""


def parse_ports(text: str) -> range:
    first, _, last = text.partition("-")
    start = int(first)
    return range(start, int(last or first) + 1)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class DatabaseNode:
    driver: PostgresDriver
    proxy: DatabaseProxy
    access: DatabaseAccess
    host: str
    """The host in `url`: where the API is reached."""
    internal_host: str
    """The bridge address, as instances see the host: the proxy listens there (the
    name in `internal_url`, `corral.net.HOST_NAME`, resolves to it on this node)."""
    ports: range
    samples: dict[str, collections.deque[dict[str, Any]]] = field(default_factory=dict)

    def server_port(self, port: int) -> int:
        """The server's own TCP port for proxy port `port`: the block after the proxy ports."""
        return port + len(self.ports)

    def listen_hosts(self, network_up: bool) -> tuple[str, ...]:
        hosts = [self.host]
        if network_up and self.internal_host not in hosts:
            hosts.append(self.internal_host)
        return tuple(hosts)

    def free_ports(self, taken: set[int], want: int = 8) -> tuple[int, ...]:
        """Ports of the range that no database holds and nothing else on the host binds."""
        found: list[int] = []
        for port in self.ports:
            if port in taken or not (_bindable(self.host, port) and _bindable(self.host, self.server_port(port))):
                continue
            found.append(port)
            if len(found) >= want:
                break
        return tuple(found)

    def record_sample(self, database_id: str, sample: dict[str, Any]) -> None:
        self.samples.setdefault(database_id, collections.deque(maxlen=SAMPLES)).append(sample)
