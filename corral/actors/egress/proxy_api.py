"""What the egress proxy calls: a small, plain async-function interface.

For each request from an instance, the proxy (corral/net or its actor) does::

    context = await egress.load_context(platform, "sandbox", sandbox_id)   # None: unknown resource
    # or, knowing only the instance: await egress.load_context_for_instance(platform, instance_id)
    verdict = egress.evaluate(context, egress.Request(host, method, path), headers)
    if not verdict.allowed:
        answer 403 with egress.denied_body(request_id)       # {error: {code: EGRESS_DENIED, ...}}
    else:
        send verdict.headers upstream
        scrubber = verdict.scrubber()                       # response headers: scrubber.headers(...)
        body chunks: scrubber.feed(chunk) ... scrubber.flush()
    await egress.record_request(platform, verdict.audit_entry(context, status_code=..., duration_ms=...,
                                bytes_in=..., bytes_out=..., sni=..., remote_addr=...))

`load_context` refreshes the tenant's OAuth tokens that are about to expire, reads the database and decrypts the resource's bound secrets; the proxy
may keep a context for a short while (a second) and reuse it for a kept-alive
connection. `evaluate` and everything below it are pure: no I/O, no clock.
Headers are `(name, value)` string pairs (decode h11's bytes as latin-1).
A CONNECT tunnel whose inner request is unknown is `Request(host, None, None)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .audit import AuditEntry
from .decision import Decision, Request, decide
from .oauth import refresh_expiring
from .policies import effective_policy
from .resources import ResourceIdentity, find_resource, resource_of_instance
from .services import EgressServices
from .store import PolicyRecord, RuleRecord
from .substitution import BoundSecret, Scrubber, substitute
from .vault import bound_secrets


@dataclass(frozen=True)
class EgressContext:
    """Everything the proxy needs to judge one resource's requests."""

    resource: ResourceIdentity
    resource_type: str
    policy: PolicyRecord
    rules: list[RuleRecord] = field(hash=False)
    secrets: list[BoundSecret] = field(hash=False, repr=False)


async def load_context(services: EgressServices, resource_type: str, resource_id: str) -> EgressContext | None:
    """The policy, rules and bound secrets of a sandbox or computer (None if it is gone)."""
    resource = await find_resource(services.db, None, resource_type, resource_id)
    if resource is None:
        return None
    policy, rules = await effective_policy(services.db, resource.tenant_id, resource.id)
    await refresh_expiring(services, resource.tenant_id)
    return EgressContext(resource, resource_type, policy, rules, await bound_secrets(services, resource))


async def load_context_for_instance(services: EgressServices, instance_id: str) -> EgressContext | None:
    """`load_context` for the sandbox or computer running as instance `instance_id`."""
    found = await resource_of_instance(services.db, instance_id)
    if found is None:
        return None
    resource_type, resource = found
    policy, rules = await effective_policy(services.db, resource.tenant_id, resource.id)
    await refresh_expiring(services, resource.tenant_id)
    return EgressContext(resource, resource_type, policy, rules, await bound_secrets(services, resource))


@dataclass(frozen=True)
class Verdict:
    """The proxy's answer for one request."""

    allowed: bool
    request: Request
    decision: Decision
    headers: list[tuple[str, str]]
    """The headers to send upstream (placeholders substituted where allowed)."""
    rejected_by: str | None
    request_transforms: list[dict[str, Any]] = field(default_factory=list)
    used: tuple[BoundSecret, ...] = field(default=(), repr=False)

    @property
    def action(self) -> str:
        return "allow" if self.allowed else "reject"

    def scrubber(self) -> Scrubber:
        """Hides the substituted values in the response (headers and body)."""
        return Scrubber(self.used)

    def audit_entry(self, context: EgressContext, **fields: Any) -> AuditEntry:
        """The audit row of this request; `fields` adds what only the proxy knows
        (`status_code`, `duration_ms`, `bytes_in`, `bytes_out`, `sni`, `remote_addr`,
        `error_message`, `response_transforms`, or `action="error"`)."""
        values: dict[str, Any] = {
            "host": self.request.host,
            "method": self.request.method,
            "path": self.request.path,
            "mode": self.decision.mode,
            "action": self.action,
            "rejected_by": self.rejected_by,
            "request_transforms": self.request_transforms,
        }
        values.update(fields)
        return AuditEntry.for_resource(context.resource, context.resource_type, **values)


def evaluate(context: EgressContext, request: Request, headers: list[tuple[str, str]]) -> Verdict:
    """Judge `request` under the resource's policy, then substitute its placeholders.

    A placeholder whose secret does not allow the host stays as it is; under `enforce`
    that rejects the request (`rejected_by: "secret_host"`), under `audit_only` it is
    only recorded. Nothing is substituted into a rejected request.
    """
    decision = decide(context.policy, list(context.rules), request)
    if not decision.allowed:
        return Verdict(False, request, decision, list(headers), decision.rejected_by)
    substitution = substitute(headers, context.secrets, request.host)
    rejected_by: str | None
    if substitution.refused:
        if decision.mode == "enforce":
            return Verdict(False, request, decision, list(headers), "secret_host")
        rejected_by = decision.rejected_by or "secret_host"
    else:
        rejected_by = decision.rejected_by
    return Verdict(
        True, request, decision, substitution.headers, rejected_by, substitution.request_transforms, substitution.used
    )


def denied_body(request_id: str, message: str = "egress denied by policy") -> bytes:
    """The body of the 403 an instance gets for a rejected request."""
    return json.dumps({"error": {"code": "EGRESS_DENIED", "message": message, "request_id": request_id}}).encode()
