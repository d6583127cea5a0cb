"""What the egress proxy asks of the layer above: decide, transform, scrub, record.

The proxy (in `net`) knows connections and HTTP; who an instance belongs to, its
policy, its secrets and the audit log live in `actors`, which implements
`EgressHooks` and hands it to the proxy. `AllowAll` lets the proxy work alone:
everything passes unchanged and nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class RequestInfo:
    """One request an instance makes through the proxy."""

    request_id: str
    client_address: str
    """The instance's address on the bridge (who is asking)."""
    method: str
    scheme: str
    """`http` or `https` (what the instance spoke, TLS being terminated by the proxy)."""
    host: str
    """The host the instance named (Host header, CONNECT target, TLS SNI or the address)."""
    port: int
    path: str
    """The request target in origin form, with its query (`/v1/x?y=1`); `""` for a CONNECT."""
    mode: str
    """`explicit` (HTTP_PROXY / CONNECT) or `transparent` (redirected by nftables)."""
    destination_address: str | None = None
    """The address the proxy connects to, already checked: the one the instance connected
    to (transparent mode), or the address the proxy resolved the named host to (explicit
    mode, as the node's DNS forwarder answers it). None only when the request never got
    that far (a refused or malformed one)."""


@dataclass(frozen=True)
class Decision:
    """`allow`, or a rejection: the instance gets `status` with an EGRESS_DENIED body."""

    allow: bool = True
    rejected_by: str | None = None
    """Why a request is (or, under audit_only, would have been) rejected: `rule:<id>`, `default_action`, ..."""
    message: str = "egress denied by policy"
    status: int = 403
    tags: dict[str, str] = field(default_factory=dict)
    """Anything the hooks want back in `record` (matched rule, policy id, ...)."""


@dataclass(frozen=True)
class Transform:
    """A header change made by `transform_headers`, as audited: never a value."""

    type: str
    header: str
    secret_id: str | None = None


@dataclass(frozen=True)
class AuditEntry:
    """What happened to one request, for `record`."""

    info: RequestInfo
    decision: Decision
    status_code: int | None
    """The status the instance received (the upstream's, or the proxy's own), None if none."""
    upstream_address: str | None
    bytes_sent: int
    bytes_received: int
    duration_ms: float
    transforms: Sequence[Transform] = ()
    error: str | None = None
    """Why the request failed at the proxy (refused destination, TLS failure, ...)."""


class Rejected(Exception):
    """What `transform_headers` raises when the headers themselves make the request refused
    (a placeholder towards a host its secret does not allow, under `enforce`)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message)
        self.decision = decision


class ResponseScrubber(Protocol):
    """Rewrites a response body on its way to the instance (e.g. secret values to placeholders)."""

    def feed(self, data: bytes) -> bytes:
        """Scrubbed bytes that can go now (a scrubber may hold back a partial match)."""
        ...

    def finish(self) -> bytes:
        """What is still held back, scrubbed, at the end of the body."""
        ...


class EgressHooks(Protocol):
    """The actors layer's side of the proxy. Every method may be called concurrently."""

    async def decide(self, info: RequestInfo) -> Decision:
        """Allow or reject the request (before anything goes upstream)."""
        ...

    async def transform_headers(self, info: RequestInfo, headers: Headers) -> tuple[Headers, Sequence[Transform]]:
        """The headers to send upstream (placeholders substituted), and what changed; raise
        `Rejected` to refuse the request because of them."""
        ...

    def scrub_response(self, info: RequestInfo, headers: Headers) -> tuple[Headers, ResponseScrubber | None]:
        """The response headers for the instance, and a body scrubber (None: the body passes as is)."""
        ...

    async def record(self, entry: AuditEntry) -> None:
        """Keep the audit row of a finished (or refused) request."""
        ...


class AllowAll:
    """The default hooks: every request passes unchanged; nothing is recorded."""

    async def decide(self, info: RequestInfo) -> Decision:
        return Decision()

    async def transform_headers(self, info: RequestInfo, headers: Headers) -> tuple[Headers, Sequence[Transform]]:
        return headers, ()

    def scrub_response(self, info: RequestInfo, headers: Headers) -> tuple[Headers, ResponseScrubber | None]:
        return headers, None

    async def record(self, entry: AuditEntry) -> None:
        return None
