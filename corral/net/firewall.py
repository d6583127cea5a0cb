"""The platform's nftables policy: one table, one chain per instance.

Layout of `table inet <name>`:

- `input`: from the bridge only replies to connections the host opened are
  accepted (the control plane talking to an agent); everything else an instance
  sends to the host itself is dropped, so host services are out of reach.
- `forward`: instance-to-instance traffic is dropped (layer 2 is blocked by
  isolated bridge ports as well); new connections towards instances are
  dropped; traffic leaving an instance is dispatched by its source address
  through the verdict map `egress` to the instance's own chain, where its network
  policy lives. Unknown sources are dropped. Instances cannot spoof source
  addresses: they have no CAP_NET_ADMIN/CAP_NET_RAW over their namespace.
- `output`: only root on the host (the control plane) may open the agent port.
- `postrouting`: outbound NAT for the instances' range.

Rules are applied with `nft -f -`, one atomic transaction per change.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

import trio

from .errors import NetworkError

CHAIN_PREFIX = "inst_"


@dataclass(frozen=True)
class FirewallConfig:
    table: str
    bridge: str
    subnet: str
    agent_port: int


async def nft(script: str, check: bool = True) -> str:
    result = await trio.run_process(["nft", "-f", "-"], stdin=script.encode(), capture_stdout=True, capture_stderr=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(f"nft failed: {result.stderr.decode().strip()}\n{script}")
    return result.stdout.decode()


async def nft_json(*args: str) -> list[dict[str, object]]:
    result = await trio.run_process(["nft", "-j", *args], capture_stdout=True, capture_stderr=True, check=False)
    if result.returncode != 0:
        return []
    return list(json.loads(result.stdout).get("nftables", []))


def chain_name(key: str) -> str:
    return CHAIN_PREFIX + key


class Firewall:
    def __init__(self, config: FirewallConfig) -> None:
        self.config = config

    @property
    def _t(self) -> str:
        return f"inet {self.config.table}"

    async def ensure_table(self) -> None:
        """Create the table and base chains if absent (existing instance chains stay)."""
        c = self.config
        existing = await nft_json("list", "table", "inet", c.table)
        if any("map" in item for item in existing):
            return
        script = f"""
table {self._t} {{
  map egress {{ type ipv4_addr : verdict; }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "{c.bridge}" ct state established,related accept
    iifname "{c.bridge}" drop
  }}
  chain forward {{
    type filter hook forward priority 0; policy accept;
    iifname "{c.bridge}" oifname "{c.bridge}" drop
    oifname "{c.bridge}" ct state established,related accept
    oifname "{c.bridge}" drop
    iifname "{c.bridge}" ip saddr vmap @egress
    iifname "{c.bridge}" drop
  }}
  chain output {{
    type filter hook output priority 0; policy accept;
    oifname "{c.bridge}" tcp dport {c.agent_port} meta skuid != 0 reject with tcp reset
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr {c.subnet} oifname != "{c.bridge}" masquerade
  }}
}}
"""
        await nft(script)

    async def add_instance(self, key: str, address: str) -> None:
        """(Re)create the instance's chain and route its traffic through it."""
        chain = chain_name(key)
        script = f"""
add chain {self._t} {chain}
flush chain {self._t} {chain}
add rule {self._t} {chain} ip daddr 169.254.0.0/16 drop
add rule {self._t} {chain} ip daddr {self.config.subnet} drop
add rule {self._t} {chain} counter accept
add element {self._t} egress {{ {address} : jump {chain} }}
"""
        try:
            await nft(script)
        except NetworkError:
            # A stale element for this address (from a crash) points elsewhere.
            await self.remove_instance(key, address)
            await nft(script)

    async def remove_instance(self, key: str, address: str | None) -> None:
        chain = chain_name(key)
        if address is not None:
            await nft(f"delete element {self._t} egress {{ {address} }}\n", check=False)
        for item in await self.egress_elements():
            if item[1] == chain:
                await nft(f"delete element {self._t} egress {{ {item[0]} }}\n", check=False)
        await nft(f"delete chain {self._t} {chain}\n", check=False)

    async def instance_chains(self) -> list[str]:
        items = await nft_json("list", "chains", "inet")
        names = []
        for item in items:
            chain = item.get("chain")
            if isinstance(chain, dict) and chain.get("table") == self.config.table:
                name = str(chain.get("name"))
                if name.startswith(CHAIN_PREFIX):
                    names.append(name)
        return names

    async def egress_elements(self) -> list[tuple[str, str]]:
        """(address, chain) pairs in the dispatch map."""
        pairs = []
        for item in await nft_json("list", "map", "inet", self.config.table, "egress"):
            table_map = item.get("map")
            if not isinstance(table_map, dict):
                continue
            for element in table_map.get("elem", []) or []:
                try:
                    address, verdict = element
                    pairs.append((str(address), str(verdict["jump"]["target"])))
                except (TypeError, KeyError, ValueError):
                    continue
        return pairs

    async def delete_table(self) -> None:
        await nft(f"delete table {self._t}\n", check=False)


def run_nft_sync(script: str) -> None:
    """For tools outside trio (cleanup scripts)."""
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=False, capture_output=True)
