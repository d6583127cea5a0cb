"""An instance's network policy (contract §11) and its nftables rendering.

A policy is a mode and rules. `unrestricted` accepts everything; `allowlist`
accepts what a rule matches and refuses the rest; `denylist` refuses what a rule
matches and accepts the rest; `isolated` refuses every forwarded packet, leaving the
instance only what it reaches on the host itself (the DNS forwarder, the egress
proxy), which the `input` chain governs, not the instance's chain.

A rule's `host` is a CIDR block, an IP or a hostname. A hostname matches the
addresses the node's DNS forwarder answered for it: each hostname of an instance's
policy has a named set (`<chain>_<digest>`, `flags timeout`) that the forwarder
fills with the answered addresses, each kept for its record's TTL.

Validation lives here too (`parse_rules`), so that the API and the firewall agree
on what a rule is; its errors name the field (`rules[0].port`) for the API's
`422 VALIDATION_ERROR` details.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MODES = ("unrestricted", "allowlist", "denylist", "isolated")
PROTOCOLS = ("tcp", "udp", "any")
RULE_FIELDS = frozenset({"host", "port", "protocol"})
MAX_RULES = 256
REFUSE = "reject with icmpx admin-prohibited"
"""Refused packets are answered (not silently dropped), so a blocked connection fails at once."""

_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class PolicyError(ValueError):
    """A rule that is not valid; `details` maps the field (`rules[0].port`) to the problem."""

    def __init__(self, details: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in details.items()))
        self.details = details


def is_hostname(host: str) -> bool:
    if len(host) > 253 or not host:
        return False
    labels = host.rstrip(".").split(".")
    return all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


@dataclass(frozen=True)
class PolicyRule:
    host: str
    """A CIDR block (`10.0.0.0/8`), an address (`1.2.3.4`), or a lowercase hostname."""
    port: int | None = None
    protocol: str = "any"

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        """The rule's addresses, or None for a hostname."""
        try:
            return ipaddress.ip_network(self.host, strict=False)
        except ValueError:
            return None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "protocol": self.protocol}

    def matches(self, address: str, port: int, protocol: str, names: set[str]) -> bool:
        """Whether a connection to address:port over protocol is this rule's."""
        if self.protocol != "any" and self.protocol != protocol:
            return False
        if self.port is not None and self.port != port:
            return False
        network = self.network
        if network is None:
            return self.host in names
        try:
            return ipaddress.ip_address(address) in network
        except ValueError:
            return False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicyRule:
        return cls(host=str(data["host"]), port=data.get("port"), protocol=str(data.get("protocol") or "any"))


@dataclass(frozen=True)
class NetworkPolicy:
    mode: str = "unrestricted"
    rules: tuple[PolicyRule, ...] = field(default_factory=tuple)

    def hostnames(self) -> list[str]:
        """The hostnames the rules name, each once, in order (only modes that use rules)."""
        if self.mode not in ("allowlist", "denylist"):
            return []
        return list(dict.fromkeys(r.host for r in self.rules if r.network is None))

    def rules_json(self) -> list[dict[str, Any]]:
        return [rule.to_json() for rule in self.rules]

    def allows(self, address: str, port: int, protocol: str = "tcp", names: Iterable[str] = ()) -> bool:
        """What the instance's chain decides for a new connection to address:port, in
        Python: for the egress proxy, which receives the instance's port 80 and 443
        connections on the host and must refuse what the policy would block
        (contract §11). `names` are the hostnames the forwarder answered `address`
        for (still within their TTL). What the firewall's `guard` closes before any
        policy (other instances, the node, link-local, private ranges) is the caller's:
        the proxy's destination check refuses the same (`corral.net.egress.destinations`)."""
        if self.mode == "unrestricted":
            return True
        if self.mode == "isolated":
            return False
        known = set(names)
        matched = any(rule.matches(address, port, protocol, known) for rule in self.rules)
        return matched if self.mode == "allowlist" else not matched


UNRESTRICTED = NetworkPolicy()


def parse_rule(item: object, where: str) -> PolicyRule:
    if not isinstance(item, dict):
        raise PolicyError({where: "must be an object with host, port, protocol"})
    problems: dict[str, str] = {}
    for name in sorted(set(item) - RULE_FIELDS):
        problems[f"{where}.{name}"] = "is not a rule field (host, port, protocol)"
    host = item.get("host")
    normalised = ""
    if not isinstance(host, str) or not host.strip():
        problems[f"{where}.host"] = "is required: a hostname, an IP or a CIDR block"
    else:
        normalised = host.strip().lower()
        try:
            normalised = str(ipaddress.ip_network(normalised, strict=False))
        except ValueError:
            if not is_hostname(normalised):
                problems[f"{where}.host"] = "must be a hostname, an IP or a CIDR block"
            normalised = normalised.rstrip(".")
    port = item.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        problems[f"{where}.port"] = "must be an integer from 1 to 65535"
    protocol = item.get("protocol")
    if protocol is None:
        protocol = "any"
    if protocol not in PROTOCOLS:
        problems[f"{where}.protocol"] = "must be tcp, udp or any"
    if problems:
        raise PolicyError(problems)
    return PolicyRule(host=normalised, port=port, protocol=str(protocol))


def parse_rules(items: object) -> tuple[PolicyRule, ...]:
    """The `rules` of a request; every problem of every rule at once (`PolicyError`)."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise PolicyError({"rules": "must be an array of {host, port?, protocol?}"})
    if len(items) > MAX_RULES:
        raise PolicyError({"rules": f"at most {MAX_RULES} rules"})
    problems: dict[str, str] = {}
    rules = []
    for index, item in enumerate(items):
        try:
            rules.append(parse_rule(item, f"rules[{index}]"))
        except PolicyError as exc:
            problems.update(exc.details)
    if problems:
        raise PolicyError(problems)
    return tuple(rules)


# -- nftables ---------------------------------------------------------------------


def set_name(chain: str, hostname: str) -> str:
    """The named set of `hostname`'s answered addresses for the instance's chain."""
    return f"{chain}_{hashlib.sha256(hostname.encode()).hexdigest()[:10]}"


def _match(rule: PolicyRule, chain: str) -> str:
    network = rule.network
    if network is None:
        where = f"ip daddr @{set_name(chain, rule.host)}"
    else:
        where = f"{'ip' if network.version == 4 else 'ip6'} daddr {network}"
    if rule.protocol == "any":
        what = "" if rule.port is None else f"meta l4proto {{ tcp, udp }} th dport {rule.port}"
    else:
        what = f"meta l4proto {rule.protocol}" + ("" if rule.port is None else f" th dport {rule.port}")
    return f"{where} {what}".strip()


def chain_rules(policy: NetworkPolicy, chain: str) -> list[str]:
    """The statements after the chain's fixed head (see `Firewall.apply_policy`)."""
    if policy.mode == "isolated":
        return [REFUSE]
    if policy.mode == "allowlist":
        return [f"{_match(rule, chain)} accept" for rule in policy.rules] + [REFUSE]
    if policy.mode == "denylist":
        return [f"{_match(rule, chain)} {REFUSE}" for rule in policy.rules] + ["counter accept"]
    return ["counter accept"]


def hostname_sets(policies: Iterable[tuple[str, NetworkPolicy]]) -> dict[str, set[str]]:
    """hostname -> the set names watching it, over (chain, policy) pairs."""
    watch: dict[str, set[str]] = {}
    for chain, policy in policies:
        for hostname in policy.hostnames():
            watch.setdefault(hostname, set()).add(set_name(chain, hostname))
    return watch
