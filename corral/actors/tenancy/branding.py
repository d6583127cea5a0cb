"""Tenant branding (contract §16): how the platform presents a tenant to the people it
invites.

`GET /tenant/branding` answers `{display_name, logo_url, primary_color, support_email,
custom_domain}`; `PUT` (tenant owner or admin) changes the fields it names (absent:
unchanged, null: cleared). Invite e-mails and invite pages use the display name (else
the tenant's name), the logo, the colour and the support address; invite URLs use the
custom domain as host (`white_label.invite_base_url`), which is the same value the
operator sets with `PUT /admin/tenants/{id}/custom-domain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from corral.errors import conflict, not_found
from corral.models import UNSET, Rule, Unset, anchored, model
from corral.storage import Database, Transaction, utc_now_iso

from . import store
from .store.branding import BrandingRecord
from .white_label import HOST, normalise_domain

COLOR = "#[0-9a-fA-F]{6}"
_PLAIN = "[^@\\s\\x1c-\\x1f\\x85<>\"']"
"""Neither `@`, white space nor a quote or angle bracket."""
EMAIL = f"{_PLAIN}{{1,64}}@{_PLAIN}{{1,253}}\\.{_PLAIN}{{2,}}"
_URL_CHAR = "[^\\s\\x1c-\\x1f\\x85<>\"']"
URL = f"(?:https://{_URL_CHAR}+|http://{_URL_CHAR}{{2,}})"
"""An http(s) URL without white space, quotes or angle brackets."""
MAX_URL = 2048


@model
class BrandingChange:
    """Fields to change; absent ones stay as they are, null clears one."""

    display_name: Annotated[str | Unset | None, Rule(max_length=100, message="must be a string of at most 100 characters or null")] = UNSET
    logo_url: Annotated[str | Unset | None, Rule(max_length=MAX_URL, pattern=URL, message="must be an http(s) URL")] = UNSET
    primary_color: Annotated[str | Unset | None, Rule(pattern=COLOR, message="must be a colour as #rrggbb", description="#rrggbb")] = UNSET
    support_email: Annotated[str | Unset | None, Rule(max_length=320, pattern=EMAIL, message="must be an e-mail address")] = UNSET
    custom_domain: Annotated[
        str | Unset | None, Rule(max_length=253, description="host of invite URLs; null clears it", schema={"pattern": anchored(f"{HOST}\\.?")})
    ] = UNSET


@dataclass(frozen=True)
class Branding:
    """A tenant's branding as invite pages and e-mails use it."""

    tenant_name: str
    display_name: str | None
    logo_url: str | None
    primary_color: str | None
    support_email: str | None
    custom_domain: str | None

    @property
    def name(self) -> str:
        """What the tenant is called to invitees."""
        return self.display_name or self.tenant_name

    def public(self) -> dict[str, Any]:
        return {
            "display_name": self.display_name,
            "logo_url": self.logo_url,
            "primary_color": self.primary_color,
            "support_email": self.support_email,
            "custom_domain": self.custom_domain,
        }


def _branding(tenant: store.TenantRecord, record: BrandingRecord | None) -> Branding:
    return Branding(
        tenant_name=tenant.name,
        display_name=record.display_name if record else None,
        logo_url=record.logo_url if record else None,
        primary_color=record.primary_color if record else None,
        support_email=record.support_email if record else None,
        custom_domain=tenant.custom_domain,
    )


async def get_branding(db: Database, tenant_id: str) -> Branding:
    tenant = await store.tenants.load(db, tenant_id)
    if tenant is None:
        raise not_found("tenant not found")
    return _branding(tenant, await store.branding.load(db, tenant_id))


async def update_branding(db: Database, tenant_id: str, change: BrandingChange, service_domain: str) -> Branding:
    """Apply `change`; a custom domain another tenant has is `409 DOMAIN_TAKEN`."""
    domain: str | Unset | None = change.custom_domain
    if isinstance(domain, str):
        domain = normalise_domain(domain, service_domain)

    def work(tx: Transaction) -> Branding:
        if not store.tenants.exists(tx, tenant_id):
            raise not_found("tenant not found")
        current = store.branding.load_in(tx, tenant_id)
        values: dict[str, Any] = {
            name: getattr(current, name) if current else None
            for name in ("display_name", "logo_url", "primary_color", "support_email")
        }
        for name in values:
            new = getattr(change, name)
            if not isinstance(new, Unset):
                values[name] = new
        if isinstance(values["primary_color"], str):
            values["primary_color"] = values["primary_color"].lower()
        store.branding.save(tx, BrandingRecord(tenant_id=tenant_id, updated_at=utc_now_iso(), **values))
        if not isinstance(domain, Unset):
            if domain is not None and store.tenants.domain_used_by_other(tx, domain, tenant_id):
                raise conflict("DOMAIN_TAKEN", "has already been taken")
            tenant = store.tenants.set_custom_domain(tx, tenant_id, domain)
        else:
            row = tx.fetch_one("SELECT * FROM tenants WHERE id = ?", (tenant_id,))
            assert row is not None
            tenant = store.tenants.TENANTS.record(row)
        return _branding(tenant, store.branding.load_in(tx, tenant_id))

    return await db.transaction(work)
