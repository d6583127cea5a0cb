"""Preview URLs: `{scheme}://{port}-{slug}.sandbox.{domain}[:{port}]`.

The service-managed domain is `--public-domain`; a tenant, workspace or project may
bring its own (domains.py picks which one a sandbox's URLs use). For local use the
scheme is http and the router's own port is written into the URL; behind a TLS edge
the operator sets `CORRAL_PREVIEW_URL_SCHEME=https` and `CORRAL_PREVIEW_URL_PORT=0`.
"""

from __future__ import annotations

from corral.config import Settings

SANDBOX_HOST_PATTERN = (
    r"(?P<port>[0-9]{1,5})-(?P<slug>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\.sandbox\.(?P<domain>[a-z0-9.-]+)"
)
"""A sandbox port preview's host name, as the router matches it (lowercased, no port)."""


def service_domain(settings: Settings) -> str:
    return settings.public_domain.lower().rstrip(".")


def router_host(settings: Settings) -> str:
    """The host preview-domain CNAMEs point to."""
    return (settings.preview_router_host or f"preview.{service_domain(settings)}").lower().rstrip(".")


def sandbox_host(port: int, slug: str, domain: str) -> str:
    return f"{port}-{slug}.sandbox.{domain}"


def sandbox_url(settings: Settings, port: int, slug: str, domain: str) -> str:
    return settings.preview_origin(sandbox_host(port, slug, domain))


def share_url(settings: Settings, port: int, slug: str, domain: str, token: str) -> str:
    return f"{sandbox_url(settings, port, slug, domain)}/?ms={token}"
