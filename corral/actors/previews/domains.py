"""White-label preview domains of a tenant, a workspace or a project.

A scope (tenant, workspace or project) has at most one apex domain. PUT stores it
`pending_dns`; a DNS check (the verify call, a check right after PUT, and the
background re-check) moves it to `configured` once both wildcard CNAMEs, `*` and
`*.sandbox`, lead to the router host; DELETE removes it. Generated URLs use the
first configured domain of project, workspace, tenant, else the service's own
domain; the router also accepts a sandbox's hosts under a domain still pending (DNS
may already point here), and always under the service's own domain. Every change of
a domain's routability is told to every node's tables (`PREVIEW_DOMAINS_CHANGED`).

A definitive DNS failure (no record, a record pointing elsewhere) sends a configured
domain back to `pending_dns`, so URLs stop using a domain that no longer resolves
to the router; a timeout changes nothing but `dns_error`.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import trio
from publicsuffixlist import PublicSuffixList

from corral.actors.periodic import run_periodically
from corral.config import Settings
from corral.errors import ApiError, conflict
from corral.net import cname_points_to, parse_name_servers
from corral.storage import Database, to_iso, utc_now, utc_now_iso

from . import store
from .services import PreviewServices
from .store import DomainRecord
from .urls import router_host, service_domain

log = logging.getLogger("corral.previews")

SCOPES = ("tenant", "workspace", "project")
LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN = f"(?:{LABEL}\\.)+{LABEL}"
"""A domain name of two or more labels, lowercase (`normalize_domain` lowercases it first)."""
MAX_DOMAIN = 253
PENDING, CONFIGURED, NOT_CONFIGURED, REMOVED = "pending_dns", "configured", "not_configured", "removed"
ROUTABLE = (PENDING, CONFIGURED)
PREVIEW_DOMAINS_CHANGED = "preview.domains"
"""Notice topic (`corral.storage.Notices`): a preview domain was put, verified, sent
back to pending or removed; tables of routable domains read them again."""
CONFIGURED_RECHECK = timedelta(hours=1)
"""A configured domain is checked again this long after its last check."""

_psl: PublicSuffixList | None = None


def _suffixes() -> PublicSuffixList:
    global _psl
    if _psl is None:
        _psl = PublicSuffixList()  # parses the bundled list once (~50 ms)
    return _psl


def invalid_domain(reason: str) -> ApiError:
    return ApiError(422, "invalid_domain", f"preview_domain {reason}", details={"preview_domain": reason})


def normalize_domain(value: Any, settings: Settings) -> str:
    """The apex domain in `value`, lowercased, or the spec's errors."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ApiError(400, "MISSING_PARAM", "preview_domain is required")
    if not isinstance(value, str):
        raise invalid_domain("must be a string")
    domain = value.strip().lower()
    if "://" in domain or domain.startswith(("http:", "https:")):
        raise invalid_domain("must not include a protocol prefix (give example.com, not https://example.com)")
    if "*" in domain:
        raise invalid_domain("must not be a wildcard (give the apex; the wildcard records are yours to create)")
    if any(c in domain for c in "/?#"):
        raise invalid_domain("must not include a path")
    if ":" in domain:
        raise invalid_domain("must not include a port")
    domain = domain[:-1] if domain.endswith(".") else domain
    if len(domain) > MAX_DOMAIN or not re.fullmatch(DOMAIN, domain):
        raise invalid_domain("must be a domain name such as example.com")
    own = service_domain(settings)
    if domain == own or domain.endswith("." + own) or own.endswith("." + domain):
        raise invalid_domain("must not be the service's own domain")
    apex = _suffixes().privatesuffix(domain)
    if apex is None:
        raise invalid_domain("is a public suffix, not a domain one can own")
    if apex != domain:
        raise invalid_domain(f"must be an apex domain, not a subdomain (give {apex})")
    return domain


def dns_instructions(settings: Settings, domain: str | None) -> dict[str, Any] | None:
    """Contract §6: the `*` record at the top, both wildcard records in `records`."""
    if domain is None:
        return None
    target = router_host(settings)
    records = [{"type": "CNAME", "name": "*", "value": target}, {"type": "CNAME", "name": "*.sandbox", "value": target}]
    return {"type": "CNAME", "name": "*", "value": target, "records": records}


@dataclass(frozen=True)
class Scope:
    type: str
    id: str
    tenant_id: str
    parents: tuple[tuple[str, str], ...] = ()
    """The scopes whose domain this one inherits, nearest first: (type, id)."""


async def get_domain(db: Database, scope: Scope) -> DomainRecord | None:
    return await store.find_domain(db, scope.type, scope.id)


async def inherited_domain(db: Database, settings: Settings, scope: Scope) -> str:
    """The domain URLs in this scope use when it has none of its own."""
    for scope_type, scope_id in scope.parents:
        domain = await store.domain_with_status(db, scope_type, scope_id, CONFIGURED)
        if domain is not None:
            return domain
    return service_domain(settings)


async def domain_public(db: Database, settings: Settings, scope: Scope, record: DomainRecord | None) -> dict[str, Any]:
    inherited = await inherited_domain(db, settings, scope)
    if record is None:
        return {
            "preview_domain": None, "default_domain": inherited, "status": NOT_CONFIGURED, "dns_status": "pending",
            "dns_instructions": None, "verified_at": None, "last_checked_at": None, "dns_error": None,
        }
    return {
        "preview_domain": record.domain,
        "default_domain": inherited,
        "status": record.status,
        "dns_status": record.dns_status,
        "dns_instructions": dns_instructions(settings, record.domain),
        "verified_at": record.verified_at,
        "last_checked_at": record.last_checked_at,
        "dns_error": record.dns_error,
        "updated_at": record.updated_at,
    }


async def put_domain(platform: PreviewServices, scope: Scope, value: Any) -> DomainRecord:
    domain = normalize_domain(value, platform.settings)
    db = platform.db
    if await store.taken_by_another_tenant(db, domain, scope.tenant_id):
        raise conflict("DOMAIN_TAKEN", "has already been taken")
    now = utc_now_iso()
    record = DomainRecord(
        scope_type=scope.type, scope_id=scope.id, tenant_id=scope.tenant_id, domain=domain,
        status=PENDING, dns_status="pending", dns_error=None, verified_at=None, last_checked_at=None,
        created_at=now, updated_at=now,
    )
    await store.replace_domain(db, record)
    _domains_changed(platform)
    platform.nursery.start_soon(_check_soon, platform, scope.type, scope.id, domain)
    return record


async def delete_domain(platform: PreviewServices, scope: Scope) -> None:
    await store.delete_domain(platform.db, scope.type, scope.id)
    _domains_changed(platform)


def _domains_changed(platform: PreviewServices) -> None:
    """Every table of routable domains, on every node, must ask again: the access
    cache, computers' desktops, deployments' hosts, the TLS edge's index listen for
    `PREVIEW_DOMAINS_CHANGED`."""
    platform.notices.tell(PREVIEW_DOMAINS_CHANGED)


async def check_dns(settings: Settings, domain: str) -> tuple[bool | None, str | None]:
    """(True, None) when both wildcards lead to the router; (False, why) when DNS says no;
    (None, why) when DNS could not be asked."""
    servers = parse_name_servers(settings.dns_servers)
    target = router_host(settings)
    probe = f"corral-check-{secrets.token_hex(4)}"
    for record, name in (("*", f"{probe}.{domain}"), ("*.sandbox", f"{probe}.sandbox.{domain}")):
        result = await cname_points_to(name, target, servers)
        if not result.ok:
            why = f"CNAME {record}.{domain} -> {target}: {result.detail}"
            return (False if result.definitive else None), why
    return True, None


async def verify(platform: PreviewServices, scope_type: str, scope_id: str, domain: str) -> DomainRecord | None:
    """Check DNS now and store the outcome; the updated record (None if it was removed meanwhile)."""
    db = platform.db
    ok, why = await check_dns(platform.settings, domain)
    now = utc_now_iso()
    before = await store.find_checked_domain(db, scope_type, scope_id, domain)
    if ok:
        await store.record_verified(db, scope_type, scope_id, domain, CONFIGURED, now)
    elif ok is False:
        await store.record_refused(db, scope_type, scope_id, domain, PENDING, why, now)
    else:
        await store.record_unanswered(db, scope_type, scope_id, domain, why, now)
    record = await store.find_checked_domain(db, scope_type, scope_id, domain)
    if record is not None and record.status != (None if before is None else before.status):
        log.info("preview domain %s of %s %s is now %s", domain, scope_type, scope_id, record.status)
        _domains_changed(platform)
    return record


async def _check_soon(platform: PreviewServices, scope_type: str, scope_id: str, domain: str) -> None:
    try:
        await verify(platform, scope_type, scope_id, domain)
    except Exception:
        log.exception("checking preview domain %s failed", domain)


async def recheck_once(platform: PreviewServices) -> int:
    """Check every pending domain, and configured ones not checked for an hour; drop orphans."""
    db = platform.db
    await store.delete_orphaned_domains(db)
    due = await store.due_for_check(db, PENDING, to_iso(utc_now() - CONFIGURED_RECHECK))
    for record in due:
        await verify(platform, record.scope_type, record.scope_id, record.domain)
    return len(due)


async def recheck_forever(platform: PreviewServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The background re-check, every `preview_dns_recheck_seconds`."""
    await run_periodically(
        lambda: recheck_once(platform),
        lambda: platform.settings.preview_dns_recheck_seconds,
        "re-checking preview domains",
        task_status=task_status,
    )


async def url_domain(db: Database, settings: Settings, tenant_id: str, workspace_id: str | None, project_id: str | None) -> str:
    """The domain of a sandbox's generated URLs: project, workspace, tenant, else the service's."""
    domains = await store.scope_domains(db, tenant_id, workspace_id, project_id, (CONFIGURED,))
    for scope_type in ("project", "workspace", "tenant"):
        if scope_type in domains:
            return domains[scope_type]
    return service_domain(settings)


async def routable_domains(db: Database, settings: Settings, tenant_id: str, workspace_id: str | None, project_id: str | None) -> frozenset[str]:
    domains = await store.scope_domains(db, tenant_id, workspace_id, project_id, ROUTABLE)
    return frozenset({service_domain(settings), *domains.values()})
