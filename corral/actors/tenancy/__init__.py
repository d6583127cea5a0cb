"""Tenancy: tenants, users, workspaces, projects, API keys, tickets, audit and outbox.

These records change rarely and hold no long-running state, so they are plain
services over the store rather than actors; they live in the actors layer because
they write, and the HTTP layer may only read the store directly. Every SQL statement
about their tables is in `store` (one module per table, frozen records); only this
package's modules call its write functions.
"""

from . import (
    api_keys,
    audit,
    branding,
    invites,
    mail,
    members,
    outbox,
    store,
    tickets,
    white_label,
    workspaces,
)
from .attribution import (
    EXTERNAL_FIELDS,
    Attribution,
    Placement,
    resolve_attribution,
    tenant_resolution_failed,
)
from .passwords import hash_password, verify_password
from .records import api_key_public, project_public, tenant_public, user_public, workspace_public
from .scopes import (
    KNOWN_SCOPES,
    PRODUCT_SCOPES,
    TENANT_ROLES,
    WORKSPACE_ROLES,
    role_at_least,
    scope_allows,
)
from .store import (
    ApiKeyRecord,
    AuditRecord,
    InviteRecord,
    KeyWithMember,
    MailRecord,
    NamedInvite,
    ProjectRecord,
    TenantMember,
    TenantRecord,
    TicketRecord,
    UserRecord,
    WorkspaceMember,
    WorkspaceRecord,
)
from .tenants import NewTenant, create_tenant, create_user, get_tenant, list_tenants, tenant_role

__all__ = [
    "EXTERNAL_FIELDS",
    "KNOWN_SCOPES",
    "PRODUCT_SCOPES",
    "TENANT_ROLES",
    "WORKSPACE_ROLES",
    "ApiKeyRecord",
    "Attribution",
    "AuditRecord",
    "InviteRecord",
    "KeyWithMember",
    "MailRecord",
    "NamedInvite",
    "NewTenant",
    "Placement",
    "ProjectRecord",
    "TenantMember",
    "TenantRecord",
    "TicketRecord",
    "UserRecord",
    "WorkspaceMember",
    "WorkspaceRecord",
    "api_key_public",
    "api_keys",
    "audit",
    "branding",
    "create_tenant",
    "create_user",
    "get_tenant",
    "hash_password",
    "invites",
    "list_tenants",
    "mail",
    "members",
    "outbox",
    "project_public",
    "resolve_attribution",
    "role_at_least",
    "scope_allows",
    "store",
    "tenant_public",
    "tenant_resolution_failed",
    "tenant_role",
    "tickets",
    "user_public",
    "verify_password",
    "white_label",
    "workspace_public",
    "workspaces",
]
