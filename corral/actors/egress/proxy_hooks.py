"""The node's egress proxy hooks: each instance's policy, secrets and audit (`corral.net.egress.EgressHooks`).

The proxy (in `net`) asks, per request: may it go (`decide`), with which headers
(`transform_headers`: placeholders become values only towards a secret's allowed
hosts), how the answer reaches the instance (`scrub_response`: echoed values become
placeholders again) and what to keep (`record`: one audit row). Who is asking is
the instance at the request's source address; its resource's context (policy,
rules, bound secrets) is loaded once and kept for `CONTEXT_TTL`. The network policy
governs ports 80 and 443 too (contract §11): the redirect hides them from the
instance's chain, so a destination the policy blocks is refused here.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Protocol

import trio

from corral.net.egress import (
    PLATFORM_MODE,
    Headers,
    Rejected,
    RequestInfo,
    Transform,
)
from corral.net.egress import (
    AuditEntry as ProxyAudit,
)
from corral.net.egress import (
    Decision as ProxyDecision,
)

from .audit import record_request
from .decision import Request, ip_literal
from .proxy_api import EgressContext, Verdict, evaluate, load_context_for_instance
from .services import EgressServices
from .substitution import Scrubber

CONTEXT_TTL = 1.0


class InstanceLocator(Protocol):
    def instance_at(self, address: str) -> str | None: ...

    def network_allows(self, source: str, destination: str, port: int) -> bool: ...


class _BodyScrubber:
    def __init__(self, scrubber: Scrubber) -> None:
        self._scrubber = scrubber

    def feed(self, data: bytes) -> bytes:
        return self._scrubber.feed(data)

    def finish(self) -> bytes:
        return self._scrubber.flush()


def _text(headers: Headers) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


def _bytes(headers: Sequence[tuple[str, str]]) -> Headers:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def _addresses_of(host: str, port: int) -> list[str]:
    """The IPv4 addresses of `host` (itself when it is one); none when it does not resolve."""
    literal = ip_literal(host)
    if literal is not None:
        return [str(literal)]
    try:
        found = await trio.socket.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({str(entry[4][0]) for entry in found})


class PolicyHooks:
    """`EgressHooks` over the egress package and the host network's policy."""

    def __init__(self, services: EgressServices, network: InstanceLocator) -> None:
        self.services = services
        self.network = network
        self._contexts: dict[str, tuple[EgressContext | None, float]] = {}
        self._verdicts: dict[str, tuple[EgressContext, Verdict]] = {}

    async def _context(self, address: str) -> EgressContext | None:
        now = time.monotonic()
        cached = self._contexts.get(address)
        if cached is not None and now - cached[1] < CONTEXT_TTL:
            return cached[0]
        instance_id = self.network.instance_at(address)
        context = None if instance_id is None else await load_context_for_instance(self.services, instance_id)
        if len(self._contexts) > 10_000:
            self._contexts.clear()
        self._contexts[address] = (context, now)
        return context

    @staticmethod
    def _request(info: RequestInfo) -> Request:
        if info.method == "CONNECT":
            return Request(info.host, None, None)
        return Request(info.host, info.method, info.path.split("?", 1)[0] or "/")

    async def decide(self, info: RequestInfo) -> ProxyDecision:
        # The proxy names the address it connects to (the one a redirected connection was
        # going to, or the name's as the node's DNS forwarder answers it), so that an
        # isolated or allowlisted instance cannot reach further by asking the proxy; a
        # request without one is judged by every address the name has.
        addresses = [info.destination_address] if info.destination_address else await _addresses_of(info.host, info.port)
        if any(not self.network.network_allows(info.client_address, address, info.port) for address in addresses):
            return ProxyDecision(allow=False, rejected_by="network_policy", message="blocked by the network policy")
        context = await self._context(info.client_address)
        if context is None:  # not a sandbox's or computer's instance: nothing to judge by
            return ProxyDecision()
        verdict = evaluate(context, self._request(info), [])
        if len(self._verdicts) > 10_000:  # requests the proxy never recorded (it always should)
            self._verdicts.clear()
        self._verdicts[info.request_id] = (context, verdict)
        if not verdict.allowed:
            return ProxyDecision(allow=False, rejected_by=verdict.rejected_by)
        return ProxyDecision(rejected_by=verdict.rejected_by)

    async def _unjudged(self, entry: ProxyAudit) -> tuple[EgressContext, Verdict] | None:
        """A request the proxy answered itself before asking `decide` (a refused or unknown
        destination, a CONNECT tunnel that could not be opened) is still its resource's row."""
        if entry.info.mode == PLATFORM_MODE or (entry.decision.allow and entry.error is None):
            return None
        context = await self._context(entry.info.client_address)
        if context is None:
            return None
        return context, evaluate(context, self._request(entry.info), [])

    async def transform_headers(self, info: RequestInfo, headers: Headers) -> tuple[Headers, Sequence[Transform]]:
        context = await self._context(info.client_address)
        if context is None:
            return headers, ()
        verdict = evaluate(context, self._request(info), _text(headers))
        self._verdicts[info.request_id] = (context, verdict)
        if not verdict.allowed:  # under enforce: a placeholder towards a host its secret does not allow
            raise Rejected(
                ProxyDecision(
                    allow=False,
                    rejected_by=verdict.rejected_by,
                    message="a secret's placeholder was sent to a host the secret does not allow",
                )
            )
        transforms = [Transform(str(t.get("type")), str(t.get("header")), t.get("secret_id")) for t in verdict.request_transforms]
        return _bytes(verdict.headers), transforms

    def scrub_response(self, info: RequestInfo, headers: Headers) -> tuple[Headers, _BodyScrubber | None]:
        found = self._verdicts.get(info.request_id)
        if found is None or not found[1].used:
            return headers, None
        scrubber = found[1].scrubber()
        return _bytes(scrubber.headers(_text(headers))), _BodyScrubber(scrubber)

    async def record(self, entry: ProxyAudit) -> None:
        found = self._verdicts.pop(entry.info.request_id, None) or await self._unjudged(entry)
        if found is None:
            return  # not a resource's request: nothing to attribute it to
        context, verdict = found
        action = "reject" if not entry.decision.allow else ("error" if entry.error else "allow")
        row = verdict.audit_entry(
            context,
            action=action,
            rejected_by=entry.decision.rejected_by or verdict.rejected_by,
            status_code=entry.status_code,
            duration_ms=round(entry.duration_ms),
            bytes_in=entry.bytes_received,
            bytes_out=entry.bytes_sent,
            sni=entry.info.host if entry.info.scheme == "https" else None,
            remote_addr=entry.upstream_address,
            error_message=entry.error,
        )
        await record_request(self.services, row)
