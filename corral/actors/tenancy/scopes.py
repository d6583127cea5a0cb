"""Scopes and roles: what a credential may do, and what a membership allows.

The specification names some scopes and says the list is incomplete; this module
is the complete list (documented in docs/api.md). A `:write` scope implies the
matching `:read`, so a key that may destroy a sandbox may also look at it.
"""

from __future__ import annotations

PRODUCT_SCOPES: tuple[str, ...] = (
    "sandboxes:read",
    "sandboxes:write",
    "computers:read",
    "computers:write",
    "deployments:read",
    "deployments:write",
    "domains:write",
    "databases:read",
    "databases:write",
    "storage:write",
    "billing:read",
    "webhooks:read",
    "webhooks:write",
    "agents:read",
    "agents:write",
    "egress:read",
    "egress:write",
    "org:read",
    "org:write",
    "keys:read",
    "keys:write",
    "audit:read",
)
"""Every scope a key can hold; user keys created without a list receive all of them."""

KNOWN_SCOPES = frozenset(PRODUCT_SCOPES)

WORKSPACE_ROLES = ("owner", "admin", "member", "viewer")
TENANT_ROLES = ("owner", "admin", "member")
_RANK = {"viewer": 0, "member": 1, "admin": 2, "owner": 3}


def role_at_least(role: str | None, minimum: str) -> bool:
    return role is not None and _RANK.get(role, -1) >= _RANK[minimum]


def scope_allows(granted: frozenset[str] | None, required: str) -> bool:
    """`None` means unrestricted (a user's own session)."""
    if granted is None or required in granted:
        return True
    area, _, access = required.partition(":")
    return access == "read" and f"{area}:write" in granted


def unknown_scopes(scopes: list[str]) -> list[str]:
    return [s for s in scopes if s not in KNOWN_SCOPES]
