"""The egress proxy: every HTTP(S) request of an instance passes it (issue 15, contract §11).

`EgressProxy` serves explicit (HTTP_PROXY, CONNECT) and transparent (nftables
redirect, `EgressRedirect`) connections, terminates TLS with leaves from
`EgressCA`, refuses forbidden destinations (`DestinationPolicy`), and asks
`EgressHooks` (implemented by the actors layer; `AllowAll` alone) about each request.
"""

from .ca import EgressCA
from .destinations import (
    FORBIDDEN,
    DestinationPolicy,
    DestinationRefused,
    DestinationUnreachable,
    open_checked,
    refusal_reason,
)
from .hooks import (
    AllowAll,
    AuditEntry,
    Decision,
    EgressHooks,
    Headers,
    Rejected,
    RequestInfo,
    ResponseScrubber,
    Transform,
)
from .proxy import PLATFORM_MODE, EgressProxy, EgressProxyConfig
from .redirect import EgressRedirect, RedirectConfig

__all__ = [
    "FORBIDDEN",
    "PLATFORM_MODE",
    "AllowAll",
    "AuditEntry",
    "Decision",
    "DestinationPolicy",
    "DestinationRefused",
    "DestinationUnreachable",
    "EgressCA",
    "EgressHooks",
    "EgressProxy",
    "EgressProxyConfig",
    "EgressRedirect",
    "Headers",
    "RedirectConfig",
    "Rejected",
    "RequestInfo",
    "ResponseScrubber",
    "Transform",
    "open_checked",
    "refusal_reason",
]
