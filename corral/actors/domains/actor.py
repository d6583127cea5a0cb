"""The custom domain: an actor over its `custom_domains` row (spec "Custom domain `status`").

pending --verify (CNAME at the FQDN leads to `verification_target`)--> verified
--first HTTPS request through the edge--> active; any --delete--> removed. Verify
of a verified or active domain is 409 `domain is already verified`; a verify whose
DNS answer is missing or elsewhere is 422 `CNAME not found` and leaves the domain
as it was, so it may be retried. After each persisted change the node's `DomainMap`
is updated, which is what the router and the TLS edge read.
"""

from __future__ import annotations

import logging
from typing import Any

from corral.actors.actor import handles
from corral.actors.nodes.homed import HomedActor
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError, conflict
from corral.net import cname_points_to, parse_name_servers
from corral.storage import utc_now_iso

from . import store
from .messages import DomainDraft, MarkIssued, Remove, Verify
from .services import CustomDomainServices
from .store import DOMAINS, REMOVED, CustomDomainRecord
from .targets import COMPUTER

log = logging.getLogger("corral.domains")

ALREADY_VERIFIED = ("DOMAIN_ALREADY_VERIFIED", "domain is already verified")


def domain_not_found() -> ApiError:
    return ApiError(404, "DOMAIN_NOT_FOUND", "custom domain not found")


def taken() -> ApiError:
    return conflict("DOMAIN_TAKEN", "has already been taken")


class CustomDomainActor(HomedActor):
    kind = "custom_domain"
    store = DOMAINS
    record: CustomDomainRecord
    gone_states = (REMOVED,)
    transitions = TransitionTable(
        {
            (("pending", "failed"), Verify): "verified",
            ("verified", MarkIssued): "active",
            ("active", MarkIssued): "active",
            ("*", Remove): REMOVED,
        },
        refusals={Verify: ALREADY_VERIFIED, MarkIssued: ("INVALID_STATE", "domain is not verified")},
    )

    @property
    def platform(self) -> CustomDomainServices:
        services: CustomDomainServices = self.services
        return services

    def not_found(self) -> ApiError:
        return domain_not_found()

    async def create_record(self, draft: DomainDraft) -> CustomDomainRecord:
        now = utc_now_iso()
        target = draft.target
        record = CustomDomainRecord(
            id=self.id, tenant_id=target.tenant_id, workspace_id=target.workspace_id, project_id=target.project_id,
            computer_id=target.id if target.kind == COMPUTER else None,
            deployment_id=None if target.kind == COMPUTER else target.id,
            fqdn=draft.fqdn, status="pending", verification_target=draft.verification_target,
            verified_at=None, tls_issued_at=None, dns_error=None,
            external_workspace_id=target.external_workspace_id, external_user_id=target.external_user_id,
            external_project_id=target.external_project_id, created_at=now, updated_at=now,
            node=self.services.settings.node_name,
        )

        def write(tx: Any) -> None:
            if store.fqdn_taken(tx, draft.fqdn):
                raise taken()
            store.insert(tx, record)

        try:
            await self.db.transaction(write)
        except ApiError:
            raise
        except Exception as exc:  # two registrations of one FQDN at once: the unique index decides
            if "unique" in str(exc).lower() or "duplicate" in str(exc).lower():
                raise taken() from None
            raise
        self.tenant_id = record.tenant_id
        self.platform.custom_domains.put(record)
        await self.emit("created", self.subject(record))
        return record

    def subject(self, record: CustomDomainRecord | None = None) -> dict[str, Any]:
        record = record or self.record
        return {
            "id": record.id, "fqdn": record.fqdn, "status": record.status,
            "computer_id": record.computer_id, "deployment_id": record.deployment_id,
        }

    def _gone(self) -> None:
        if self.state == REMOVED:
            raise self.not_found()

    @handles(Verify)
    async def verify(self, message: Verify) -> CustomDomainRecord:
        self._gone()
        next_state = self.transition(message)
        record = self.record
        servers = parse_name_servers(self.platform.settings.dns_servers)
        check = await cname_points_to(record.fqdn, record.verification_target, servers)
        if not check.ok:
            await self.persist(dns_error=check.detail)
            raise ApiError(
                422, "CNAME_NOT_FOUND", "CNAME not found",
                details={"fqdn": record.fqdn, "expected": record.verification_target, "dns": check.detail},
            )
        await self.persist(state=next_state, verified_at=utc_now_iso(), dns_error=None)
        self.platform.custom_domains.put(self.record)
        log.info("custom domain %s verified (-> %s)", record.fqdn, record.verification_target)
        await self.emit("verified", self.subject())
        return self.record

    @handles(MarkIssued)
    async def mark_issued(self, message: MarkIssued) -> CustomDomainRecord:
        self._gone()
        next_state = self.transition(message)
        if self.state != next_state:
            await self.persist(state=next_state, tls_issued_at=message.at)
            self.platform.custom_domains.put(self.record)
            await self.emit("active", {**self.subject(), "tls_issued_at": message.at})
        return self.record

    @handles(Remove)
    async def remove(self, message: Remove) -> CustomDomainRecord:
        self._gone()
        next_state = self.transition(message)
        await self.persist(state=next_state)
        self.platform.custom_domains.drop(self.record.fqdn, self.id)
        await self.emit("removed", self.subject())
        return self.record
