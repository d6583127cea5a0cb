"""The platform's nftables policy: one table, one chain per instance.

Layout of `table inet <name>`:

- `input`: from the bridge only replies to connections the host opened are
  accepted (the control plane talking to an agent); everything else an instance
  sends to the host itself is dropped, so host services are out of reach.
- `forward`: instance-to-instance traffic is dropped (layer 2 is blocked by
  isolated bridge ports as well); new connections towards instances are
  dropped; traffic leaving an instance first passes `guard`, then is dispatched
  by its source address through the verdict map `egress` to the instance's own
  chain, where its network policy lives. Unknown sources are dropped. Instances
  cannot spoof source addresses: they have no CAP_NET_ADMIN/CAP_NET_RAW over
  their namespace.
- `guard`: what no instance reaches, whatever its policy says (contract §18), on
  every port and protocol: the instance subnet, the node's own addresses (`fib
  daddr type local`: those are delivered to `input`, which drops them, so this
  is a second lock), loopback, the unspecified range, link-local (metadata
  included), multicast and broadcast; and, unless `allow_private`
  (`CORRAL_ALLOW_PRIVATE_DESTINATIONS=1`), RFC 1918, CGNAT (100.64.0.0/10) and
  IPv6 unique-local addresses. Exceptions before the private ranges: port 53 of
  the resolvers instances are given when the node's DNS forwarder does not run
  (the host's, often private), and the test-only `open_networks`. Refused
  packets are answered (`reject`), so a blocked connection fails at once. The
  chain is rewritten at every `ensure_table`, so a changed setting reaches
  instances re-adopted after a restart too.
- `services`: what instances may reach on the host itself, jumped to from `input`
  before its drop: the node's DNS forwarder on the bridge address (port 53).
- `output`: only root on the host (the control plane) may open the agent port.
- `postrouting`: outbound NAT for the instances' range.

An instance's chain starts with a fixed head (replies of its connections pass, so a
policy change applies to new connections only) followed by its network policy
(`corral.net.policy`); `guard` has already refused what no policy may open.

The services on the node that instances do reach (the DNS forwarder, the egress
proxy, the tenant's database proxy ports) all listen on the bridge address and
are accepted in `input` (`services`, and the rules `corral.net.egress.redirect`
and `corral.net.pgproxy.access` add); ports 80 and 443 of every other address are
redirected to the egress proxy before `forward`, which refuses the same ranges
(`corral.net.egress.destinations`).

Rules are applied with `nft -f -`, one atomic transaction per change.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import trio

from .errors import NetworkError
from .policy import REFUSE, UNRESTRICTED, NetworkPolicy, chain_rules, set_name

CHAIN_PREFIX = "inst_"
MARK_PREFIX = "corral-policy "
"""The comment on an instance chain's head rule: this, then `policy_mark` of its rules."""
GUARD = "guard"

ALWAYS_CLOSED_V4 = ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")
"""Unspecified, loopback, link-local (metadata 169.254.169.254 included), multicast, broadcast."""
ALWAYS_CLOSED_V6 = ("::/128", "::1/128", "::ffff:0:0/96", "fe80::/10", "ff00::/8")
"""Unspecified, loopback, IPv4-mapped, link-local, multicast."""
PRIVATE_V4 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
"""RFC 1918 and CGNAT: closed unless `allow_private`."""
PRIVATE_V6 = ("fc00::/7", "fec0::/10")
"""Unique-local and (deprecated) site-local: closed unless `allow_private`."""


@dataclass(frozen=True)
class FirewallConfig:
    table: str
    bridge: str
    subnet: str
    agent_port: int
    gateway: str = ""
    """The bridge's address, where the DNS forwarder listens (empty: no DNS rule)."""
    allow_private: bool = False
    """Open RFC 1918 and CGNAT to instances (`CORRAL_ALLOW_PRIVATE_DESTINATIONS`); never the rest of `guard`."""
    open_networks: tuple[str, ...] = ()
    """Test-only (`CORRAL_EGRESS_ALLOWED_DESTINATIONS`): private networks instances reach anyway."""


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


def policy_mark(statements: Sequence[str]) -> str:
    """A digest of an instance chain's policy rules (what its head rule's comment says)."""
    return hashlib.sha256("\n".join(statements).encode()).hexdigest()[:32]


def chain_name(key: str) -> str:
    return CHAIN_PREFIX + key


class Firewall:
    def __init__(self, config: FirewallConfig) -> None:
        self.config = config

    @property
    def _t(self) -> str:
        return f"inet {self.config.table}"

    async def ensure_table(self, resolvers: Sequence[str] = ()) -> None:
        """Create the table and base chains if absent (existing instance chains stay), and
        (re)write `guard`; `resolvers` are the name servers instances are given besides
        the node's DNS forwarder, whose port 53 stays open to them."""
        c = self.config
        existing = await nft_json("list", "table", "inet", c.table)
        if any("map" in item for item in existing):
            await self._ensure_services(existing)
            await self._ensure_guard(existing, resolvers)
            return
        script = f"""
table {self._t} {{
  map egress {{ type ipv4_addr : verdict; }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "{c.bridge}" ct state established,related accept
    iifname "{c.bridge}" jump services
    iifname "{c.bridge}" drop
  }}
  chain services {{
{self._services_rules()}
  }}
  chain {GUARD} {{
  }}
  chain forward {{
    type filter hook forward priority 0; policy accept;
    iifname "{c.bridge}" oifname "{c.bridge}" drop
    oifname "{c.bridge}" ct state established,related accept
    oifname "{c.bridge}" drop
    iifname "{c.bridge}" jump {GUARD}
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
        await nft(script + self._guard_script(resolvers))

    def _services_rules(self) -> str:
        gateway = self.config.gateway
        if not gateway:
            return ""
        return f"    ip daddr {gateway} meta l4proto {{ tcp, udp }} th dport 53 accept"

    async def _ensure_services(self, existing: list[dict[str, object]]) -> None:
        """A table made before the `services` chain existed gets it (instances' chains stay)."""
        chains = [item.get("chain") for item in existing]
        if any(isinstance(chain, dict) and chain.get("name") == "services" for chain in chains):
            return
        rules = self._services_rules()
        script = f"add chain {self._t} services\n"
        if rules:
            script += f"add rule {self._t} services {rules.strip()}\n"
        script += f'insert rule {self._t} input iifname "{self.config.bridge}" jump services\n'
        await nft(script)

    def guard_rules(self, resolvers: Sequence[str] = ()) -> list[str]:
        """The statements of `guard`, in order (see the module's docstring)."""
        c = self.config
        rules = [
            f"ip daddr {c.subnet} {REFUSE}",
            f"fib daddr type local {REFUSE}",
            f"ip daddr {_set(ALWAYS_CLOSED_V4)} {REFUSE}",
            f"ip6 daddr {_set(ALWAYS_CLOSED_V6)} {REFUSE}",
        ]
        if c.allow_private:
            return rules
        servers = [address for address in resolvers if _is_ipv4(address)]
        if servers:
            rules.append(f"ip daddr {_set(servers)} meta l4proto {{ tcp, udp }} th dport 53 return")
        for version, networks in _by_version(c.open_networks).items():
            rules.append(f"{'ip' if version == 4 else 'ip6'} daddr {_set(networks)} return")
        rules += [f"ip daddr {_set(PRIVATE_V4)} {REFUSE}", f"ip6 daddr {_set(PRIVATE_V6)} {REFUSE}"]
        return rules

    def _guard_script(self, resolvers: Sequence[str]) -> str:
        lines = [f"flush chain {self._t} {GUARD}"]
        lines += [f"add rule {self._t} {GUARD} {rule}" for rule in self.guard_rules(resolvers)]
        return "\n".join(lines) + "\n"

    async def _ensure_guard(self, existing: list[dict[str, object]], resolvers: Sequence[str]) -> None:
        """Rewrite `guard` (the settings may have changed since the table was made); a
        table made before it existed gets it, jumped to at the head of `forward`."""
        chains = [item.get("chain") for item in existing]
        script = ""
        if not any(isinstance(chain, dict) and chain.get("name") == GUARD for chain in chains):
            script += f"add chain {self._t} {GUARD}\n"
            script += f'insert rule {self._t} forward iifname "{self.config.bridge}" jump {GUARD}\n'
        await nft(script + self._guard_script(resolvers))

    def _chain_script(self, chain: str, policy: NetworkPolicy, stale_sets: list[str]) -> str:
        t = self._t
        statements = chain_rules(policy, chain)
        lines = [f"add chain {t} {chain}"]
        for hostname in policy.hostnames():
            lines.append(f"add set {t} {set_name(chain, hostname)} {{ type ipv4_addr; flags timeout; }}")
        lines += [
            f"flush chain {t} {chain}",
            f'add rule {t} {chain} ct state established,related accept comment "{MARK_PREFIX}{policy_mark(statements)}"',
        ]
        lines += [f"add rule {t} {chain} {statement}" for statement in statements]
        lines += [f"delete set {t} {name}" for name in stale_sets]
        return "\n".join(lines) + "\n"

    async def chain_mark(self, chain: str) -> tuple[bool, str | None]:
        """Whether the chain exists, and the policy mark its head rule carries."""
        items = await nft_json("list", "chain", "inet", self.config.table, chain)
        exists = any(isinstance(item.get("chain"), dict) for item in items)
        for item in items:
            rule = item.get("rule")
            if isinstance(rule, dict):
                comment = str(rule.get("comment") or "")
                return exists, comment[len(MARK_PREFIX):] if comment.startswith(MARK_PREFIX) else None
        return exists, None

    async def _holds(self, chain: str, policy: NetworkPolicy) -> tuple[bool, bool]:
        """(the chain exists, it already holds exactly this policy's rules).

        Rewriting a chain that has rules deletes them, and a commit that deletes rules
        waits for the kernel's RCU grace period: 15 to 30 ms measured on a loaded node,
        against 3 ms for one that only adds. An instance started again finds its chain
        as its last boot left it, so the mark on its head rule (a digest of the rules
        below it) spares that rewrite."""
        exists, mark = await self.chain_mark(chain)
        return exists, exists and mark == policy_mark(chain_rules(policy, chain))

    async def add_instance(
        self, key: str, address: str, policy: NetworkPolicy = UNRESTRICTED, *, may_be_current: bool = True
    ) -> None:
        """(Re)create the instance's chain and route its traffic through it. Without
        `may_be_current` (a new instance) the chain is written without looking first."""
        chain = chain_name(key)
        element = f"add element {self._t} egress {{ {address} : jump {chain} }}\n"
        current = may_be_current and (await self._holds(chain, policy))[1]
        script = element if current else self._chain_script(chain, policy, []) + element
        try:
            await nft(script)
        except NetworkError:
            # A stale element for this address (from a crash) points elsewhere.
            await self.remove_instance(key, address)
            await nft(script)

    async def apply_policy(self, key: str, policy: NetworkPolicy) -> bool:
        """Replace the policy part of the instance's chain in one transaction; False
        when the instance has no chain (it is not running: its next start applies it)."""
        chain = chain_name(key)
        exists, current = await self._holds(chain, policy)
        if not exists:
            return False
        if current:
            return True
        wanted = {set_name(chain, h) for h in policy.hostnames()}
        stale = [name for name in await self.instance_sets(chain) if name not in wanted]
        await nft(self._chain_script(chain, policy, stale))
        return True

    async def instance_sets(self, chain: str) -> list[str]:
        """The hostname sets of one instance's chain."""
        names = []
        for item in await nft_json("list", "sets", "inet"):
            found = item.get("set")
            if isinstance(found, dict) and found.get("table") == self.config.table:
                name = str(found.get("name"))
                if name.startswith(chain + "_"):
                    names.append(name)
        return names

    async def add_addresses(self, set_names: list[str], addresses: list[tuple[str, int]]) -> None:
        """Add answered addresses, each with its timeout in seconds, to hostname sets.
        A set gone meanwhile (its instance stopped, its policy changed) is skipped."""
        elements = ", ".join(f"{address} timeout {max(1, ttl)}s" for address, ttl in addresses)
        for name in set_names:
            await nft(f"add element {self._t} {name} {{ {elements} }}\n", check=False)

    async def remove_instance(self, key: str, address: str | None) -> None:
        chain = chain_name(key)
        if address is not None:
            await nft(f"delete element {self._t} egress {{ {address} }}\n", check=False)
        for item in await self.egress_elements():
            if item[1] == chain:
                await nft(f"delete element {self._t} egress {{ {item[0]} }}\n", check=False)
        await nft(f"delete chain {self._t} {chain}\n", check=False)
        for name in await self.instance_sets(chain):
            await nft(f"delete set {self._t} {name}\n", check=False)

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


def _set(items: Iterable[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def _is_ipv4(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 4
    except ValueError:
        return False


def _by_version(cidrs: Iterable[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        found.setdefault(network.version, []).append(str(network))
    return found


def run_nft_sync(script: str) -> None:
    """For tools outside trio (cleanup scripts)."""
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=False, capture_output=True)
