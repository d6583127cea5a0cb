"""nftables for the egress proxy: instances' ports 80 and 443 go to it, whatever they asked.

A table of its own (`ip <table>_egress`) beside the platform's `inet <table>`, with
one NAT chain on prerouting: TCP from the bridge to ports 80 and 443 of any address
but the gateway is redirected to the proxy on the gateway address. The platform's
`input` chain drops whatever instances send to the host, so one rule, tagged with a
comment, is inserted at its head to accept the proxy's port (and found again by its
tag, so installing twice adds nothing). `SO_ORIGINAL_DST` gives the proxy the
destination back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..firewall import nft, nft_json

COMMENT = "corral-egress-proxy"
PORTS = (80, 443)


@dataclass(frozen=True)
class RedirectConfig:
    table: str
    """The platform's table (`inet <table>`); the proxy's is `ip <table>_egress`."""
    bridge: str
    subnet: str
    gateway: str
    proxy_port: int

    @property
    def own_table(self) -> str:
        return f"{self.table}_egress"


class EgressRedirect:
    def __init__(self, config: RedirectConfig) -> None:
        self.config = config

    async def install(self) -> None:
        """(Re)create the redirect table; make sure the input rule is there. Idempotent."""
        c = self.config
        ports = ", ".join(str(p) for p in PORTS)
        await nft(f"add table ip {c.own_table}\ndelete table ip {c.own_table}\n")
        await nft(
            f"""
table ip {c.own_table} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{c.bridge}" ip saddr {c.subnet} ip daddr != {c.gateway} tcp dport {{ {ports} }} dnat to {c.gateway}:{c.proxy_port}
  }}
}}
"""
        )
        if not await self._input_rule_handles():
            await nft(
                f'insert rule inet {c.table} input iifname "{c.bridge}" ip saddr {c.subnet} ip daddr {c.gateway}'
                f' tcp dport {c.proxy_port} accept comment "{COMMENT}"\n'
            )

    async def _input_rule_handles(self) -> list[int]:
        handles = []
        for item in await nft_json("list", "chain", "inet", self.config.table, "input"):
            rule = item.get("rule")
            if isinstance(rule, dict) and rule.get("comment") == COMMENT:
                handles.append(int(str(rule["handle"])))
        return handles

    async def remove(self) -> None:
        c = self.config
        await nft(f"delete table ip {c.own_table}\n", check=False)
        for handle in await self._input_rule_handles():
            await nft(f"delete rule inet {c.table} input handle {handle}\n", check=False)
