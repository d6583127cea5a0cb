"""nftables: which instances may open a connection to which database port.

The platform's `input` chain drops whatever an instance sends to the host beyond
replies and the `services` chain's exceptions (`corral.net.firewall`). Databases add
one exception there: `ip daddr <gateway> ip saddr . tcp dport @db_clients accept`,
where the set holds (instance address, database port) pairs, one for every running
instance of the database's tenant. Another tenant's instance is in no pair with the
port: its SYN is dropped, so it gets no connection at all. The set is replaced in
one `nft -f` transaction each time it changes.
"""

from __future__ import annotations

import json

from ..firewall import nft, nft_json

SET = "db_clients"


class DatabaseAccess:
    def __init__(self, table: str, gateway: str) -> None:
        self.table = table
        self.gateway = gateway
        self.applied: frozenset[tuple[str, int]] | None = None

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
