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


@dataclass
class DatabaseNode:
    driver: PostgresDriver
    proxy: DatabaseProxy
    access: DatabaseAccess
    host: str
    """The host in `url`: where the API is reached."""
    internal_host: str
    """The host in `internal_url`: the bridge address, as instances see the host."""
    ports: range
    samples: dict[str, collections.deque[dict[str, Any]]] = field(default_factory=dict)

    def listen_hosts(self, network_up: bool) -> tuple[str, ...]:
        hosts = [self.host]
        if network_up and self.internal_host not in hosts:
            hosts.append(self.internal_host)
        return tuple(hosts)

    def free_ports(self, taken: set[int], want: int = 8) -> tuple[int, ...]:
        """Ports of the range that no database holds and nothing else on the host binds."""
        found: list[int] = []
        for port in self.ports:
            if port in taken:
                continue
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((self.host, port))
                except OSError:
                    continue
            found.append(port)
            if len(found) >= want:
                break
        return tuple(found)

    def record_sample(self, database_id: str, sample: dict[str, Any]) -> None:
        self.samples.setdefault(database_id, collections.deque(maxlen=SAMPLES)).append(sample)
