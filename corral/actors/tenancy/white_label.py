"""White-label hosts: the tenant's custom domain, which invite links use.

A tenant's `custom_domain` is set by the operator (`PUT /admin/tenants/{id}/custom-domain`):
the platform then sends that tenant's invitees to `https://<custom_domain>/invites/...`,
so the domain must reach this service (a CNAME to the service's public domain).
Tenants without one get links on the service's own public domain.
"""

from __future__ import annotations

import re

from corral.config import Settings
from corral.errors import conflict, not_found, validation_error
from corral.storage import Database, Transaction

from . import store
from .store import TenantRecord

LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_LABEL = re.compile(f"^{LABEL}$")
HOST = f"(?:{LABEL}\\.)+(?![0-9]+$){LABEL}"
"""What `normalise_domain` accepts (lowercased, without the final dot), as a `pattern`."""
MAX_DOMAIN_LENGTH = 253


def normalise_domain(value: str, service_domain: str) -> str:
    """A lowercase RFC 1123 host name with at least two labels that is not the service's own."""
    domain = value.strip().lower().rstrip(".")
    labels = domain.split(".")
    problem = None
    if not domain or len(domain) > MAX_DOMAIN_LENGTH:
        problem = f"must be a host name of at most {MAX_DOMAIN_LENGTH} characters"
    elif len(labels) < 2 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        problem = "must be a host name such as app.example.com (no scheme, port, path or wildcard)"
    elif domain == service_domain or domain.endswith("." + service_domain):
        problem = "must not be the service's own domain or below it"
    if problem is not None:
        raise validation_error({"custom_domain": problem})
    return domain


def invite_base_url(settings: Settings, custom_domain: str | None) -> str:
    """`https://<custom domain>`, else the service's public domain (plain HTTP with the API
    port for a `localhost` name, so that links work on a development machine)."""
    if custom_domain:
        return f"https://{custom_domain}"
    domain = settings.public_domain
    if domain == "localhost" or domain.endswith(".localhost"):
        return f"http://{domain}:{settings.port}"
    return f"https://{domain}"


async def set_custom_domain(db: Database, tenant_id: str, domain: str | None) -> TenantRecord:
    """Set (or with `None` clear) a tenant's custom domain; `409 DOMAIN_TAKEN` when another
    tenant has it."""

    def work(tx: Transaction) -> TenantRecord:
        if not store.tenants.exists(tx, tenant_id):
            raise not_found("tenant not found")
        if domain is not None and store.tenants.domain_used_by_other(tx, domain, tenant_id):
            raise conflict("DOMAIN_TAKEN", "has already been taken")
        return store.tenants.set_custom_domain(tx, tenant_id, domain)

    return await db.transaction(work)
