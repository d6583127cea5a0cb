"""The allowlist decision, as a pure function of a policy, its rules and one request.

Contract §11: rules are tried highest `priority` first, then the most specific
pattern (exact before wildcard before cidr; a longer wildcard suffix or CIDR prefix
before a shorter one; a rule narrowed by `method` or `path_glob` before one that is
not). `cidr` rules match IP-literal destinations only. The first matching rule that
is not `warn_only` decides; with none, the policy's `default_action` does. A matching
`warn_only` deny rule is recorded (`rejected_by`), never enforced. Under `audit_only`
everything passes and a would-be rejection is recorded with `action: "allow"`.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from dataclasses import dataclass
from typing import Protocol

RULE_KINDS = ("exact", "wildcard", "cidr")
ACTIONS = ("allow", "deny")
MODES = ("audit_only", "enforce")


class Rule(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def method(self) -> str | None: ...
    @property
    def path_glob(self) -> str | None: ...
    @property
    def action(self) -> str: ...
    @property
    def warn_only(self) -> int: ...
    @property
    def priority(self) -> int: ...


class Policy(Protocol):
    @property
    def mode(self) -> str: ...
    @property
    def default_action(self) -> str: ...


@dataclass(frozen=True)
class Request:
    """What the proxy knows of one request before it is sent."""

    host: str
    method: str | None = None
    """None for a CONNECT tunnel whose inner request is not known (yet)."""
    path: str | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    """Whether the proxy lets the request through."""
    rejected_by: str | None
    """`rule:<id>` or `default_action` when the request was (or, under `audit_only`
    or a `warn_only` rule, would have been) rejected; None otherwise."""
    mode: str
    matched_rule: str | None = None
    warnings: tuple[str, ...] = ()
    """Ids of the `warn_only` rules that matched."""

    @property
    def action(self) -> str:
        """The audit row's `action`."""
        return "allow" if self.allowed else "reject"


def normalize_host(host: str) -> str:
    """Lowercase, without a trailing dot, the brackets of an IPv6 literal or a port."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(normalize_host(host))
    except ValueError:
        return None


def host_matches(pattern: str, kind: str, host: str) -> bool:
    """Whether `host` (a name or an IP literal) matches a rule or `allowed_hosts` pattern."""
    host = normalize_host(host)
    pattern = pattern.strip().lower().rstrip(".")
    if kind == "cidr":
        address = ip_literal(host)
        if address is None:
            return False
        try:
            return address in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    if kind == "wildcard" or pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com"
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == pattern


def specificity(rule: Rule) -> tuple[int, int, int]:
    """Larger is more specific: (kind rank, pattern length or prefix, narrowing)."""
    narrowing = int(bool(rule.method)) + int(bool(rule.path_glob))
    if rule.kind == "exact":
        return (3, len(rule.pattern), narrowing)
    if rule.kind == "wildcard":
        return (2, len(rule.pattern), narrowing)
    try:
        prefix = ipaddress.ip_network(rule.pattern, strict=False).prefixlen
    except ValueError:
        prefix = 0
    return (1, prefix, narrowing)


def ordered(rules: list[Rule]) -> list[Rule]:
    """Rules in the order they are tried."""
    return sorted(rules, key=lambda rule: (-rule.priority, tuple(-part for part in specificity(rule)), rule.id))


def rule_matches(rule: Rule, request: Request) -> bool:
    if not host_matches(rule.pattern, rule.kind, request.host):
        return False
    if rule.method and (request.method is None or rule.method.upper() != request.method.upper()):
        return False
    if rule.path_glob:
        if request.path is None:
            return False
        path = request.path.split("?", 1)[0] or "/"
        if not fnmatch.fnmatchcase(path, rule.path_glob):
            return False
    return True


def decide(policy: Policy, rules: list[Rule], request: Request) -> Decision:
    """Allow or reject `request` under `policy` and its `rules`."""
    warnings: list[str] = []
    matched: Rule | None = None
    for rule in ordered(rules):
        if not rule_matches(rule, request):
            continue
        if rule.warn_only:
            warnings.append(rule.id)
            continue
        matched = rule
        break
    if matched is not None:
        denied = matched.action == "deny"
        rejected_by = f"rule:{matched.id}" if denied else None
    else:
        denied = policy.default_action == "deny"
        rejected_by = "default_action" if denied else None
    if rejected_by is None and warnings:
        warned_deny = next((rule for rule in rules if rule.id in warnings and rule.action == "deny"), None)
        if warned_deny is not None:
            rejected_by = f"rule:{warned_deny.id}"
    enforce = policy.mode == "enforce"
    return Decision(
        allowed=not (denied and enforce),
        rejected_by=rejected_by,
        mode=policy.mode,
        matched_rule=matched.id if matched is not None else None,
        warnings=tuple(warnings),
    )
