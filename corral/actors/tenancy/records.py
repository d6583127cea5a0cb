"""Public shapes of tenancy records, as the API returns them."""

from __future__ import annotations

from typing import Any

from .store import ApiKeyRecord, ProjectRecord, TenantRecord, UserRecord, WorkspaceRecord


def tenant_public(tenant: TenantRecord) -> dict[str, Any]:
    return {"id": tenant.id, "name": tenant.name, "created_at": tenant.created_at}


def user_public(user: UserRecord) -> dict[str, Any]:
    return {"id": user.id, "email": user.email, "name": user.name}


def workspace_public(workspace: WorkspaceRecord, role: str | None = None) -> dict[str, Any]:
    record = {
        "id": workspace.id,
        "tenant_id": workspace.tenant_id,
        "name": workspace.name,
        "slug": workspace.slug,
        "is_default": bool(workspace.is_default),
        "created_at": workspace.created_at,
        "updated_at": workspace.updated_at,
    }
    if role is not None:
        record["role"] = role
    return record


def project_public(project: ProjectRecord) -> dict[str, Any]:
    return {
        "id": project.id,
        "tenant_id": project.tenant_id,
        "workspace_id": project.workspace_id,
        "name": project.name,
        "slug": project.slug,
        "is_default": bool(project.is_default),
        "created_at": project.created_at,
        "updated_at": project.updated_at,
    }


def api_key_public(key: ApiKeyRecord, plaintext: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "user_id": key.user_id,
        "name": key.name,
        "key_prefix": key.key_prefix,
        "key_type": key.key_type,
        "key_purpose": key.key_purpose,
        "scopes": list(key.scopes),
        "allowed_ips": None if key.allowed_ips is None else list(key.allowed_ips),
        "workspace_id": key.workspace_id,
        "rate_limit_rpm": key.rate_limit_rpm,
        "status": key.status,
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
        "last_used_at": key.last_used_at,
    }
    if plaintext is not None:
        record["key"] = plaintext
    return record
