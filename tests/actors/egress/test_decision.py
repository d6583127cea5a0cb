"""The pure allow/reject decision of contract §11: priority, specificity, kinds, warn_only, modes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from corral.actors.egress import Request, decide, host_matches
from corral.actors.egress.decision import normalize_host, ordered


@dataclass(frozen=True)
class R:
    id: str
    pattern: str
    kind: str = "exact"
    action: str = "allow"
    priority: int = 100
    method: str | None = None
    path_glob: str | None = None
    warn_only: int = 0


@dataclass(frozen=True)
class P:
    mode: str = "enforce"
    default_action: str = "deny"


@pytest.mark.parametrize(
    ("pattern", "kind", "host", "expected"),
    [
        ("api.example.com", "exact", "api.example.com", True),
        ("api.example.com", "exact", "API.Example.com.", True),
        ("api.example.com", "exact", "api.example.com:443", True),
        ("api.example.com", "exact", "x.api.example.com", False),
        ("*.example.com", "wildcard", "a.example.com", True),
        ("*.example.com", "wildcard", "a.b.example.com", True),
        ("*.example.com", "wildcard", "example.com", False),
        ("*.example.com", "wildcard", "badexample.com", False),
        ("10.0.0.0/8", "cidr", "10.1.2.3", True),
        ("10.0.0.0/8", "cidr", "11.1.2.3", False),
        ("10.0.0.0/8", "cidr", "ten.example.com", False),
        ("2001:db8::/32", "cidr", "[2001:db8::1]", True),
        ("2001:db8::/32", "cidr", "[2001:db8::1]:443", True),
    ],
)
def test_host_matches(pattern: str, kind: str, host: str, expected: bool) -> None:
    assert host_matches(pattern, kind, host) is expected


def test_normalize_host() -> None:
    assert normalize_host("[::1]:8443") == "::1"
    assert normalize_host("Example.COM.") == "example.com"


def test_default_action_without_a_match() -> None:
    denied = decide(P(default_action="deny"), [], Request("x.test", "GET", "/"))
    assert (denied.allowed, denied.action, denied.rejected_by) == (False, "reject", "default_action")
    allowed = decide(P(default_action="allow"), [], Request("x.test", "GET", "/"))
    assert (allowed.allowed, allowed.rejected_by) == (True, None)


def test_highest_priority_first_then_the_most_specific() -> None:
    rules = [
        R("wild-allow", "*.example.com", "wildcard", "allow", priority=100),
        R("exact-deny", "api.example.com", "exact", "deny", priority=100),
        R("low-allow", "api.example.com", "exact", "allow", priority=1),
    ]
    decision = decide(P(default_action="allow"), rules, Request("api.example.com", "GET", "/"))
    assert decision.rejected_by == "rule:exact-deny" and not decision.allowed
    assert decide(P(), rules, Request("www.example.com", "GET", "/")).allowed
    rules.append(R("top-allow", "*.example.com", "wildcard", "allow", priority=200))
    assert decide(P(), rules, Request("api.example.com", "GET", "/")).matched_rule == "top-allow"


def test_specificity_order() -> None:
    rules = [
        R("cidr8", "10.0.0.0/8", "cidr"),
        R("cidr24", "10.1.2.0/24", "cidr"),
        R("short", "*.com", "wildcard"),
        R("long", "*.example.com", "wildcard"),
        R("exact", "a.example.com"),
        R("exact-narrow", "a.example.com", method="GET"),
    ]
    assert [rule.id for rule in ordered(rules)] == ["exact-narrow", "exact", "long", "short", "cidr24", "cidr8"]


def test_cidr_rules_match_ip_literals_only() -> None:
    rules = [R("net", "93.184.0.0/16", "cidr", "allow")]
    assert decide(P(), rules, Request("93.184.216.34", "GET", "/")).allowed
    assert not decide(P(), rules, Request("example.com", "GET", "/")).allowed


def test_method_and_path_glob_narrow_a_rule() -> None:
    rules = [R("get-v1", "api.test", method="get", path_glob="/v1/*")]
    assert decide(P(), rules, Request("api.test", "GET", "/v1/items?x=1")).allowed
    assert not decide(P(), rules, Request("api.test", "POST", "/v1/items")).allowed
    assert not decide(P(), rules, Request("api.test", "GET", "/v2/items")).allowed
    assert not decide(P(), rules, Request("api.test", None, None)).allowed


def test_warn_only_rules_are_recorded_not_enforced() -> None:
    rules = [R("warn", "api.test", action="deny", warn_only=1, priority=500)]
    decision = decide(P(default_action="allow"), rules, Request("api.test", "GET", "/"))
    assert decision.allowed and decision.warnings == ("warn",) and decision.rejected_by == "rule:warn"
    rules.append(R("deny", "api.test", action="deny"))
    decision = decide(P(default_action="allow"), rules, Request("api.test", "GET", "/"))
    assert not decision.allowed and decision.rejected_by == "rule:deny" and decision.warnings == ("warn",)


def test_audit_only_passes_everything_and_records_the_would_be_rejection() -> None:
    rules = [R("deny", "bad.test", action="deny")]
    decision = decide(P(mode="audit_only", default_action="allow"), rules, Request("bad.test", "GET", "/"))
    assert decision.allowed and decision.action == "allow" and decision.rejected_by == "rule:deny"
    decision = decide(P(mode="audit_only", default_action="deny"), [], Request("x.test", "GET", "/"))
    assert decision.allowed and decision.rejected_by == "default_action"
