"""Custom domains for the HTTP layer: register, list, verify, remove, and their public shape.

A domain is attached to one computer or one deployment of the caller's tenant (404
otherwise, as for every other route of those resources). Its `verification_target`
is the resource's own host `{slug}.{public domain}` (contract §12); the domain is
routed by the preview router as that host once verified. Writes go through each
domain's `CustomDomainActor`.
"""

from __future__ import annotations

from typing import Any

from corral.actors.nodes.homed import LivesElsewhere
from corral.actors.nodes.homes import node_is_live
from corral.actors.previews.urls import service_domain
from corral.errors import ApiError
from corral.ids import new_uuid

from . import store
from .actor import CustomDomainActor, domain_not_found
from .messages import DomainDraft, MarkIssued, Remove, Verify
from .names import normalize_fqdn
from .services import CustomDomainServices
from .store import CustomDomainRecord
from .targets import DomainTarget


def domain_public(record: CustomDomainRecord) -> dict[str, Any]:
    """The spec's custom-domain record, and the DNS record to create."""
    return {
        "id": record.id,
        "fqdn": record.fqdn,
        "status": record.status,
        "computer_id": record.computer_id,
        "deployment_id": record.deployment_id,
        "tenant_id": record.tenant_id,
        "workspace_id": record.workspace_id,
        "project_id": record.project_id,
        "verification_target": record.verification_target,
        "dns_instructions": {"type": "CNAME", "name": record.fqdn, "value": record.verification_target},
        "verified_at": record.verified_at,
        "tls_issued_at": record.tls_issued_at,
        "external_workspace_id": record.external_workspace_id,
        "external_user_id": record.external_user_id,
        "external_project_id": record.external_project_id,
        "node": record.node,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def verification_target(platform: CustomDomainServices, target: DomainTarget) -> str:
    return f"{target.slug}.{service_domain(platform.settings)}"


async def register_domain(platform: CustomDomainServices, target: DomainTarget, value: Any) -> CustomDomainRecord:
    """A new `pending` domain of `target` (400/422 for a bad name, 409 when taken anywhere)."""
    fqdn = normalize_fqdn(value, service_domain(platform.settings))
    draft = DomainDraft(fqdn=fqdn, target=target, verification_target=verification_target(platform, target))
    ref = await platform.system.create(CustomDomainActor, new_uuid(), draft)
    record = await store.DOMAINS.load(platform.db, ref.id)
    if record is None:  # removed between its creation and this read
        raise domain_not_found()
    return record


async def find_domain(
    platform: CustomDomainServices, tenant_id: str, domain_id: str, *, key_workspace_id: str | None = None
) -> CustomDomainRecord:
    record = await store.find(platform.db, tenant_id, domain_id)
    if record is None or (key_workspace_id is not None and record.workspace_id != key_workspace_id):
        raise domain_not_found()
    return record


async def list_domains(
    platform: CustomDomainServices, tenant_id: str, *, computer_id: str | None = None, deployment_id: str | None = None,
    key_workspace_id: str | None = None,
) -> list[CustomDomainRecord]:
    return await store.list_for(
        platform.db, tenant_id, computer_id=computer_id, deployment_id=deployment_id, within_workspace=key_workspace_id
    )


async def verify_domain(platform: CustomDomainServices, record: CustomDomainRecord) -> CustomDomainRecord:
    ref = await platform.system.get(CustomDomainActor, record.id)
    verified: CustomDomainRecord = await ref.ask(Verify())
    return verified


async def remove_domain(platform: CustomDomainServices, record: CustomDomainRecord) -> CustomDomainRecord:
    ref = await platform.system.get(CustomDomainActor, record.id)
    removed: CustomDomainRecord = await ref.ask(Remove())
    return removed


async def remove_domains_of(platform: CustomDomainServices, column: str, resource_id: str) -> int:
    """Remove every domain of a deleted computer (`computer_id`) or deployment
    (`deployment_id`). Every node hears the deletion and runs this: each removes the
    domains it is home to, and those whose home is lost (one node wins each); a domain
    another node removed first is skipped."""
    here = platform.settings.node_name
    removed = 0
    for domain_id, home in await store.homes_of_resource(platform.db, column, resource_id):
        if home not in (None, here) and await node_is_live(platform.db, home):
            continue  # its home hears the deletion too
        try:
            ref = await platform.system.get(CustomDomainActor, domain_id)
            await ref.ask(Remove())
        except LivesElsewhere:
            continue  # another node took it first, and removes it
        except ApiError as exc:
            if exc.status != 404:
                raise
            continue
        removed += 1
    return removed


async def mark_issued(platform: CustomDomainServices, domain_id: str, at: str) -> None:
    """Tell the domain its certificate is out (the router does not wait for the answer)."""
    await platform.system.ref(CustomDomainActor, domain_id).tell(MarkIssued(at))
