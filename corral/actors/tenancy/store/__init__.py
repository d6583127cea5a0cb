"""Tenancy's rows: one module per table, each holding every SQL statement about it and
returning frozen, typed records (`RowStore`).

Anyone may read through these modules; only the tenancy package's own modules call
their write functions (marked "writes" in each module).
"""

from . import (
    api_keys,
    audit,
    branding,
    invites,
    outbox,
    projects,
    tenant_members,
    tenants,
    tickets,
    users,
    workspace_members,
    workspaces,
)
from .api_keys import ApiKeyRecord, KeyWithMember
from .audit import AuditRecord
from .invites import InviteRecord, NamedInvite
from .outbox import MailRecord
from .projects import ProjectRecord
from .tenant_members import TenantMember, TenantMemberRecord
from .tenants import TenantRecord
from .tickets import TicketRecord
from .users import UserRecord
from .workspace_members import WorkspaceMember
from .workspaces import WorkspaceRecord

__all__ = [
    "ApiKeyRecord",
    "AuditRecord",
    "InviteRecord",
    "KeyWithMember",
    "MailRecord",
    "NamedInvite",
    "ProjectRecord",
    "TenantMember",
    "TenantMemberRecord",
    "TenantRecord",
    "TicketRecord",
    "UserRecord",
    "WorkspaceMember",
    "WorkspaceRecord",
    "api_keys",
    "audit",
    "branding",
    "invites",
    "outbox",
    "projects",
    "tenant_members",
    "tenants",
    "tickets",
    "users",
    "workspace_members",
    "workspaces",
]
