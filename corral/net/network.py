"""The host side of instance networking, as one object the runtime driver receives.

`HostNetwork.setup()` prepares the bridge, forwarding and the nftables table;
`attach(id)` gives an instance an address, a named network namespace, a veth pair
into the bridge and its firewall chain; `detach(id)` removes all of it;
`cleanup_stale(keep)` finds what a crash left behind (namespaces, veths, chains,
addresses of instances that no longer exist) and removes it.

With `dns_forwarder` on, `setup()` also starts the node's DNS forwarder on the
bridge address (in the nursery it was given) and instances' `resolv.conf` names
it. `apply_policy(id, policy)` puts an instance's network policy in its chain (at
once when it runs, at its next `attach` otherwise); policies are kept in
`policies.json` of the state directory, so a restarted control plane still fills
the hostname sets of re-adopted instances and re-creates their chains with them.

Names are derived from the instance id, so every piece can be found again after a
restart without any other record: netns `<netns_prefix><id>`, host veth
`<link_prefix><first 12 hex digits>`, chain `inst_<same 12 digits>`.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from . import links
from .addresses import AddressAllocator
from .dns_forwarder import DnsForwarder, upstream_servers
from .egress.redirect import EgressRedirect, RedirectConfig
from .firewall import CHAIN_PREFIX, Firewall, FirewallConfig, chain_name
from .links import Netlink
from .policy import UNRESTRICTED, NetworkPolicy, PolicyRule, hostname_sets

log = logging.getLogger("corral.net")

DEFAULT_AGENT_PORT = 49983


def instance_key(instance_id: str) -> str:
    return instance_id.replace("-", "").lower()[:12]


def host_dns_servers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """The host's resolvers that an instance can reach (not loopback)."""
    servers = []
    try:
        for line in Path(resolv_conf).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                try:
                    address = ipaddress.ip_address(parts[1])
                except ValueError:
                    continue
                if address.version == 4 and not address.is_loopback:
                    servers.append(parts[1])
    except OSError:
        pass
    return servers


@dataclass(frozen=True)
class NetworkConfig:
    """Where instances live on the host. Tests use their own bridge, range and table."""

    state_dir: Path
    bridge: str = "corral0"
    subnet: str = "10.88.0.0/16"
    nft_table: str = "corral"
    link_prefix: str = "cv"
    netns_prefix: str = "corral-"
    agent_port: int = DEFAULT_AGENT_PORT
    dns_servers: tuple[str, ...] = field(default_factory=lambda: tuple(host_dns_servers()))
    """Resolvers named in instances' resolv.conf when the forwarder is off."""
    dns_forwarder: bool = False
    """Run the node's DNS forwarder on the bridge address (instances' only resolver then)."""
    upstream_dns: tuple[str, ...] = ()
    """Where the forwarder asks, `host[:port]`; empty: the system's resolvers (loopback ones too)."""
    dns_port: int = 53
    egress_port: int | None = None
    """The egress proxy's port on the gateway: instances' ports 80 and 443 are redirected to it (None: not)."""
    allow_private_destinations: bool = False
    """Open RFC 1918 and CGNAT addresses to instances on every port (`CORRAL_ALLOW_PRIVATE_DESTINATIONS`);
    the instance subnet, the node's own addresses, loopback and link-local stay closed."""
    open_destinations: tuple[str, ...] = ()
    """Test-only private networks instances reach anyway (`CORRAL_EGRESS_ALLOWED_DESTINATIONS`)."""

    def __post_init__(self) -> None:
        if len(self.link_prefix) > 3:
            raise ValueError("link_prefix must be at most 3 characters (interface names are 15)")
        if len(self.bridge) > 15:
            raise ValueError("bridge name must be at most 15 characters")


@dataclass(frozen=True)
class Attachment:
    """An instance's network: what the driver records and the launcher needs."""

    instance_id: str
    address: str
    prefixlen: int
    gateway: str
    netns: str
    netns_path: str
    host_link: str
    chain: str
    dns_servers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["dns_servers"] = list(self.dns_servers)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attachment:
        values = dict(data)
        values["dns_servers"] = tuple(values.get("dns_servers") or ())
        return cls(**values)


HOST_NAME = "host.corral.internal"
"""The host as its instances see it: the node's DNS forwarder answers this name with the
bridge address, on every node its own, so an address written with it (a database's
`internal_url`) reaches the node the instance runs on, whichever node wrote it."""


class HostNetwork:
    def __init__(self, config: NetworkConfig, nursery: trio.Nursery | None = None) -> None:
        self.config = config
        self.network = ipaddress.IPv4Network(config.subnet)
        self.addresses = AddressAllocator(Path(config.state_dir) / "addresses.json", config.subnet)
        self.gateway = str(self.addresses.gateway)
        self.firewall = Firewall(
            FirewallConfig(
                config.nft_table, config.bridge, config.subnet, config.agent_port,
                gateway=self.gateway if config.dns_forwarder else "",
                allow_private=config.allow_private_destinations,
                open_networks=config.open_destinations,
            )
        )
        self.netlink = Netlink()
        self.redirect = (
            EgressRedirect(RedirectConfig(config.nft_table, config.bridge, config.subnet, self.gateway, config.egress_port))
            if config.egress_port is not None
            else None
        )
        self._ready = False
        self._nursery = nursery
        self._policies_path = Path(config.state_dir) / "policies.json"
        self._policies: dict[str, NetworkPolicy] = self._load_policies()
        self._watch: dict[str, set[str]] = {}
        self._answered: dict[str, dict[str, float]] = {}
        """watched hostname -> {address: expiry (trio clock)}: what the sets hold, for `allows`."""
        self._refresh_watch()
        self.dns = DnsForwarder(
            self.gateway, upstream_servers(config.upstream_dns), self._on_answer, port=config.dns_port,
            local_names={HOST_NAME: self.gateway},
        )
        self._dns_running = False

    @property
    def agent_port(self) -> int:
        """The port every instance's agent listens on."""
        return self.config.agent_port

    # -- naming ---------------------------------------------------------------

    def netns_name(self, instance_id: str) -> str:
        return f"{self.config.netns_prefix}{instance_id}"

    def host_link(self, instance_id: str) -> str:
        return f"{self.config.link_prefix}{instance_key(instance_id)}"

    # -- lifecycle ------------------------------------------------------------

    async def setup(self) -> None:
        """Bridge with the gateway address, IPv4 forwarding, the DNS forwarder, the nftables table."""
        await self.netlink.call(links.ensure_bridge, self.config.bridge, self.gateway, self.network.prefixlen)
        with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write("1")
        if self.config.dns_forwarder and self._nursery is not None and not self._dns_running:
            try:
                await self._nursery.start(self.dns.serve)
                self._dns_running = True
            except OSError as exc:  # instances fall back to the upstream resolvers
                log.error("the DNS forwarder could not listen on %s:%d: %s", self.gateway, self.config.dns_port, exc)
        # Instances given other resolvers than the forwarder keep reaching their port 53.
        await self.firewall.ensure_table(resolvers=[s for s in self.instance_dns if s != self.gateway])
        if self.redirect is not None:
            await self.redirect.install()
        self._ready = True

    @property
    def instance_dns(self) -> tuple[str, ...]:
        """What instances' resolv.conf names: the forwarder when it runs."""
        if self._dns_running and self.config.dns_port == 53:
            return (self.gateway,)
        return self.config.dns_servers

    # -- network policy -------------------------------------------------------

    def policy(self, instance_id: str) -> NetworkPolicy:
        return self._policies.get(instance_id, UNRESTRICTED)

    async def apply_policy(self, instance_id: str, policy: NetworkPolicy) -> bool:
        """Make `policy` the instance's: in its chain now if it runs (True), else at its
        next attach. New connections follow it at once; open ones keep going."""
        if policy == UNRESTRICTED:
            self._policies.pop(instance_id, None)
        else:
            self._policies[instance_id] = policy
        self._save_policies()
        self._refresh_watch()
        applied = await self.firewall.apply_policy(instance_key(instance_id), policy)
        if applied:
            self.dns.prefetch(policy.hostnames())
        return applied

    def forget_policy(self, instance_id: str) -> None:
        if self._policies.pop(instance_id, None) is not None:
            self._save_policies()
            self._refresh_watch()

    async def _on_answer(self, hostname: str, addresses: list[tuple[str, int]]) -> None:
        sets = self._watch.get(hostname)
        if sets:
            now = trio.current_time()
            known = self._answered.setdefault(hostname, {})
            known.update({address: now + ttl for address, ttl in addresses})
            await self.firewall.add_addresses(sorted(sets), addresses)

    def instance_at(self, address: str) -> str | None:
        """The instance whose address on the bridge is `address` (who is asking the egress proxy)."""
        return next((i for i, a in self.addresses.assignments().items() if a == address), None)

    def allows(self, source: str, destination: str, port: int, protocol: str = "tcp") -> bool:
        """Whether the policy of the instance at `source` lets it open a connection to
        destination:port (for the egress proxy; an unknown source is refused)."""
        owner = self.instance_at(source)
        if owner is None:
            return False
        now = trio.current_time()
        names = [name for name, known in self._answered.items() if known.get(destination, 0.0) > now]
        return self.policy(owner).allows(destination, port, protocol, names)

    def _refresh_watch(self) -> None:
        pairs = [(chain_name(instance_key(i)), p) for i, p in self._policies.items()]
        self._watch = hostname_sets(pairs)
        self._answered = {name: known for name, known in self._answered.items() if name in self._watch}

    def _load_policies(self) -> dict[str, NetworkPolicy]:
        try:
            data = json.loads(self._policies_path.read_text())
        except (OSError, ValueError):
            return {}
        return {
            instance_id: NetworkPolicy(item["mode"], tuple(PolicyRule.from_json(r) for r in item["rules"]))
            for instance_id, item in data.items()
        }

    def _save_policies(self) -> None:
        data = {i: {"mode": p.mode, "rules": p.rules_json()} for i, p in self._policies.items()}
        self._policies_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._policies_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data))
        temporary.replace(self._policies_path)

    async def plan(self, instance_id: str) -> Attachment:
        """The attachment `attach` makes, its address allocated, before it is made (a
        launch starts with it meanwhile); idempotent."""
        if not self._ready:
            await self.setup()
        address = str(self.addresses.allocate(instance_id))
        netns = self.netns_name(instance_id)
        host_link = self.host_link(instance_id)
        return Attachment(
            instance_id=instance_id,
            address=address,
            prefixlen=self.network.prefixlen,
            gateway=self.gateway,
            netns=netns,
            netns_path=links.netns_path(netns),
            host_link=host_link,
            chain=chain_name(instance_key(instance_id)),
            dns_servers=self.instance_dns,
        )

    async def attach(self, instance_id: str) -> Attachment:
        """Everything the instance needs to be on the network; idempotent."""
        attachment = await self.plan(instance_id)
        netns, host_link, address = attachment.netns, attachment.host_link, attachment.address
        try:
            await self.netlink.call(lambda ipr: links.create_netns(netns))
            kept = await self.netlink.call(
                links.create_veth, host_link, netns, self.config.bridge, address, self.network.prefixlen, self.gateway
            )
            policy = self.policy(instance_id)
            # Only an instance whose network was kept may still have its chain as made.
            await self.firewall.add_instance(instance_key(instance_id), address, policy, may_be_current=kept)
            self.dns.prefetch(policy.hostnames())
        except BaseException:
            await self.detach(instance_id)
            raise
        return attachment

    def is_attached(self, instance_id: str) -> bool:
        return os.path.exists(links.netns_path(self.netns_name(instance_id))) and os.path.exists(
            f"/sys/class/net/{self.host_link(instance_id)}"
        )

    async def detach(self, instance_id: str) -> None:
        """Remove the chain, the veth, the namespace and the address. Idempotent."""
        address = self.addresses.lookup(instance_id)
        await self.firewall.remove_instance(instance_key(instance_id), str(address) if address else None)
        await self.netlink.call(links.delete_link, self.host_link(instance_id))
        await self.netlink.call(lambda ipr: links.delete_netns(self.netns_name(instance_id)))
        if address is not None:
            await self.netlink.call(links.forget_neighbour, self.config.bridge, str(address))
        self.addresses.release(instance_id)

    async def cleanup_stale(self, keep: set[str]) -> list[str]:
        """Remove every piece belonging to an instance not in `keep`; return what went."""
        removed: list[str] = []
        keep_keys = {instance_key(i) for i in keep}
        for name in links.netns_with_prefix(self.config.netns_prefix):
            instance_id = name[len(self.config.netns_prefix) :]
            if instance_id not in keep:
                await self.netlink.call(lambda ipr, n=name: links.delete_netns(n))
                removed.append(f"netns {name}")
        for name in await self.netlink.call(links.links_with_prefix, self.config.link_prefix):
            if name == self.config.bridge:
                continue
            if name[len(self.config.link_prefix) :] not in keep_keys:
                await self.netlink.call(links.delete_link, name)
                removed.append(f"link {name}")
        elements = await self.firewall.egress_elements()
        for chain in await self.firewall.instance_chains():
            key = chain[len(CHAIN_PREFIX) :]
            if key not in keep_keys:
                address = next((a for a, c in elements if c == chain), None)
                await self.firewall.remove_instance(key, address)
                removed.append(f"chain {chain}")
        for owner in self.addresses.assignments():
            if owner not in keep:
                self.addresses.release(owner)
                removed.append(f"address of {owner}")
        for owner in list(self._policies):
            if owner not in keep:
                self.forget_policy(owner)
        return removed

    async def teardown(self) -> None:
        """Remove the bridge and the table too (tests; uninstall). Instances must be gone."""
        await self.cleanup_stale(set())
        if self.redirect is not None:
            await self.redirect.remove()
        await self.firewall.delete_table()
        await self.netlink.call(links.delete_link, self.config.bridge)
        self._ready = False

    def close(self) -> None:
        self.netlink.close()
