"""nftables: which instances may open a connection to which database port.

The platform's `input` chain drops whatever an instance sends to the host beyond
replies and the `services` chain's exceptions (`corral.net.firewall`). Databases add
one exception there: `ip daddr <gateway> ip saddr . tcp dport @db_clients accept`,
where the set holds (instance address, database port) pairs, one for every running
instance of the database's tenant. Another tenant's instance is in no pair with the
port: its SYN is dropped, so it gets no connection at all. The set is replaced in
one `nft -f` transaction each time it changes.

The fast path: while a database runs, its server listens on TCP itself (its own
port), and the kernel sends new connections to the proxy's port straight there
(`table ip <table>_db`, map `fast`: (host, proxy port) -> (host, server port), for
packets from the bridge in `prerouting` and the host's own in `output`). Relaying
every byte through Python costs a large share of a small query's time; only the
connections that must wake a suspended server need the proxy. Before a server
stops, its entries go first, so the next connection reaches the proxy and wakes it.

The kernel forwards on its own, so a fast path would outlive the node's process: a
control plane that died (`kill -9`) while its machine runs on would leave its
database servers reachable at their `url` after another node took them over (a
promoted replica is the database now). So every entry expires `FAST_PATH_SECONDS` after
it was last renewed, and the node renews them every `RENEW_SECONDS` (`renew`): once
its process is gone, new connections reach the proxy's port, where nothing listens,
within that time, before the node is seen lost (6 s). A node whose loop stalls
longer only loses the fast path meanwhile: its proxy serves those connections.
"""

from __future__ import annotations

import json

from ..firewall import nft, nft_json

SET = "db_clients"
FAST_PATH_SECONDS = 4
"""How long a fast path lasts unless its node renews it (every `RENEW_SECONDS`)."""
RENEW_SECONDS = 1.0


class DatabaseAccess:
    def __init__(self, table: str, gateway: str) -> None:
        self.table = table
        self.gateway = gateway
        self.applied: frozenset[tuple[str, int]] | None = None
        self.fast: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._fast_table = False

    @property
    def fast_table(self) -> str:
        return f"{self.table}_db"

    async def _ensure_fast_table(self) -> None:
        """The fast path's table, made afresh the first time (what an earlier run of the
        node left goes with it), then the entries this node holds now."""
        if self._fast_table and await nft_json("list", "map", "ip", self.fast_table, "fast"):
            return
        t = f"ip {self.fast_table}"
        await nft(
            f"add table {t}\n"
            f"delete table {t}\n"
            f"add table {t}\n"
            f"add map {t} fast {{ type ipv4_addr . inet_service : ipv4_addr . inet_service; flags timeout; }}\n"
            f"add chain {t} prerouting {{ type nat hook prerouting priority dstnat; policy accept; }}\n"
            f"add chain {t} output {{ type nat hook output priority -100; policy accept; }}\n"
            f"add rule {t} prerouting dnat ip addr . port to ip daddr . tcp dport map @fast\n"
            f"add rule {t} output dnat ip addr . port to ip daddr . tcp dport map @fast\n"
        )
        self._fast_table = True
        for entries in self.fast.values():
            await self._add(entries)

    async def reset(self) -> None:
        """At the node's start: no fast path an earlier run left stays (each database
        running here opens its own again)."""
        self.fast.clear()
        try:
            await self.drop_fast_table()
        except OSError:  # no `nft` on this host: nothing was left, and no fast path will be opened
            self._fast_table = False

    async def renew(self) -> None:
        """Keep this node's fast paths for another `FAST_PATH_SECONDS` (every entry expires
        unless renewed: see the module docstring), in one transaction."""
        if not self.fast or not self._fast_table:
            return
        entries = tuple(entry for group in self.fast.values() for entry in group)
        await nft(f"flush map ip {self.fast_table} fast\nadd element ip {self.fast_table} fast {{ {self._elements(entries)} }}\n")

    @staticmethod
    def _elements(entries: tuple[tuple[str, int, int], ...]) -> str:
        return ", ".join(f"{host} . {port} timeout {FAST_PATH_SECONDS}s : {host} . {target}" for host, port, target in entries)

    async def _add(self, entries: tuple[tuple[str, int, int], ...]) -> None:
        await nft(f"add element ip {self.fast_table} fast {{ {self._elements(entries)} }}\n")

    async def open_fast_path(self, database_id: str, hosts: tuple[str, ...], port: int, server_port: int) -> None:
        """New connections to `port` at each host go to the server's own `server_port`."""
        entries = tuple((host, port, server_port) for host in hosts)
        await self.close_fast_path(database_id)
        self.fast[database_id] = entries
        await self._ensure_fast_table()
        await self._add(entries)

    async def close_fast_path(self, database_id: str) -> None:
        """New connections reach the proxy again (existing ones go on)."""
        entries = self.fast.pop(database_id, None)
        if entries and self._fast_table:
            keys = ", ".join(f"{host} . {port}" for host, port, _ in entries)
            await nft(f"delete element ip {self.fast_table} fast {{ {keys} }}\n", check=False)

    async def drop_fast_table(self) -> None:
        await nft(f"add table ip {self.fast_table}\ndelete table ip {self.fast_table}\n", check=False)
        self._fast_table = False

    async def _has_rule(self) -> bool:
        for item in await nft_json("list", "chain", "inet", self.table, "services"):
            rule = item.get("rule")
            if isinstance(rule, dict) and f"@{SET}" in json.dumps(rule):
                return True
        return False

    async def apply(self, pairs: set[tuple[str, int]], *, force: bool = False) -> bool:
        """Make the set exactly `pairs` (and the rule that reads it); False when the
        platform's table is not there yet (no instance network on this node)."""
        wanted = frozenset(pairs)
        if wanted == self.applied and not force:
            return True
        if not await nft_json("list", "chain", "inet", self.table, "services"):
            return False
        t = f"inet {self.table}"
        script = f"add set {t} {SET} {{ type ipv4_addr . inet_service; }}\nflush set {t} {SET}\n"
        if wanted:
            elements = ", ".join(f"{address} . {port}" for address, port in sorted(wanted))
            script += f"add element {t} {SET} {{ {elements} }}\n"
        if not await self._has_rule():
            script += f"insert rule {t} services ip daddr {self.gateway} ip saddr . tcp dport @{SET} accept\n"
        await nft(script)
        self.applied = wanted
        return True
