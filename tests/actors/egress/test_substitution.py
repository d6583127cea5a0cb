"""Placeholder substitution towards allowed hosts, the scrubber, and the proxy's evaluate()."""

from __future__ import annotations

from corral.actors.egress import BoundSecret, EgressContext, Request, Scrubber, evaluate, substitute
from corral.actors.egress.resources import ResourceIdentity
from corral.actors.egress.store import PolicyRecord, RuleRecord

TOKEN = "svc-tok-" + "A" * 32
OTHER = "svc-tok-" + "B" * 32
SECRET = BoundSecret("s1", TOKEN, "sk-live-1234567890", ("api.example.com", "*.stripe.test"))


def test_substitutes_in_any_header_towards_an_allowed_host() -> None:
    result = substitute([("Authorization", f"Bearer {TOKEN}"), ("X-Key", TOKEN), ("Accept", "*/*")], [SECRET], "api.example.com")
    assert result.headers == [("Authorization", "Bearer sk-live-1234567890"), ("X-Key", "sk-live-1234567890"), ("Accept", "*/*")]
    assert result.request_transforms == [
        {"type": "placeholder", "header": "authorization", "secret_id": "s1"},
        {"type": "placeholder", "header": "x-key", "secret_id": "s1"},
    ]
    assert result.used == (SECRET,) and result.refused == ()
    assert substitute([("A", TOKEN)], [SECRET], "pay.stripe.test").headers == [("A", "sk-live-1234567890")]


def test_leaves_the_placeholder_towards_another_host() -> None:
    result = substitute([("Authorization", f"Bearer {TOKEN}")], [SECRET], "evil.test")
    assert result.headers == [("Authorization", f"Bearer {TOKEN}")]
    assert result.refused == ("s1",) and result.request_transforms == [] and result.used == ()


def test_unbound_placeholders_are_never_replaced() -> None:
    result = substitute([("Authorization", f"Bearer {OTHER}")], [SECRET], "api.example.com")
    assert result.headers == [("Authorization", f"Bearer {OTHER}")] and result.refused == ()


def test_empty_allowed_hosts_means_any_host() -> None:
    anywhere = BoundSecret("s2", OTHER, "value-two")
    assert substitute([("K", OTHER)], [anywhere], "whatever.test").headers == [("K", "value-two")]


def test_scrubber_hides_values_across_chunks() -> None:
    scrubber = Scrubber([SECRET])
    out = scrubber.feed(b'{"echo": "sk-live-12') + scrubber.feed(b'34567890", "again": "sk-live-1234567890"}') + scrubber.flush()
    assert out == f'{{"echo": "{TOKEN}", "again": "{TOKEN}"}}'.encode()
    assert scrubber.replaced == 2
    assert scrubber.headers([("X-Echo", "sk-live-1234567890")]) == [("X-Echo", TOKEN)]
    assert Scrubber([]).feed(b"plain") == b"plain"


def _context(mode: str, default_action: str, rules: list[RuleRecord]) -> EgressContext:
    resource = ResourceIdentity("r1", "t1", "w1", "u1", None, None)
    policy = PolicyRecord("p1", "t1", None, "r1", "sandbox", "r1", mode, default_action, "now", "now")
    return EgressContext(resource, "sandbox", policy, rules, [SECRET])


def test_evaluate_rejects_a_secret_towards_a_foreign_host_under_enforce() -> None:
    headers = [("Authorization", f"Bearer {TOKEN}")]
    verdict = evaluate(_context("enforce", "allow", []), Request("evil.test", "GET", "/"), headers)
    assert not verdict.allowed and verdict.rejected_by == "secret_host" and verdict.headers == headers
    verdict = evaluate(_context("audit_only", "allow", []), Request("evil.test", "GET", "/"), headers)
    assert verdict.allowed and verdict.rejected_by == "secret_host" and verdict.headers == headers
    entry = verdict.audit_entry(_context("audit_only", "allow", []), status_code=200)
    assert entry.tenant_id == "t1" and entry.workspace_id == "w1" and entry.action == "allow" and entry.status_code == 200


def test_evaluate_substitutes_when_allowed_and_not_when_rejected() -> None:
    headers = [("Authorization", f"Bearer {TOKEN}")]
    verdict = evaluate(_context("enforce", "allow", []), Request("api.example.com", "GET", "/"), headers)
    assert verdict.allowed and verdict.headers == [("Authorization", "Bearer sk-live-1234567890")]
    assert verdict.request_transforms == [{"type": "placeholder", "header": "authorization", "secret_id": "s1"}]
    deny = RuleRecord("d1", "t1", "p1", "api.example.com", "exact", None, None, "deny", 0, 100, "now")
    verdict = evaluate(_context("enforce", "allow", [deny]), Request("api.example.com", "GET", "/"), headers)
    assert not verdict.allowed and verdict.rejected_by == "rule:d1" and verdict.headers == headers
    assert verdict.scrubber().feed(b"x") == b"x"
