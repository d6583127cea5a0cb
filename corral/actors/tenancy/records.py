"""Public shapes of tenancy records, as the API returns them."""

from __future__ import annotations

import json
from typing import Any

from corral.storage import Row


def tenant_public(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "created_at": row["created_at"]}


def user_public(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "email": row["email"], "name": row["name"]}


def workspace_public(row: Row, role: str | None = None) -> dict[str, Any]:
    record = {
        "id": row["id"],
        "tenant_id": row["tenant_id"],
        "name": row["name"],
        "slug": row["slug"],
        "is_default": bool(row["is_default"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    if role is not None:
        record["role"] = role
    return record


def project_public(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "tenant_id": row["tenant_id"],
        "workspace_id": row["workspace_id"],
        "name": row["name"],
        "slug": row["slug"],
        "is_default": bool(row["is_default"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def api_key_public(row: Row, plaintext: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": row["id"],
        "tenant_id": row["tenant_id"],
        "user_id": row["user_id"],
        "name": row["name"],
        "key_prefix": row["key_prefix"],
        "key_type": row["key_type"],
        "key_purpose": row["key_purpose"],
        "scopes": json.loads(row["scopes"]),
        "allowed_ips": json.loads(row["allowed_ips"]) if row["allowed_ips"] else None,
        "workspace_id": row["workspace_id"],
        "rate_limit_rpm": row["rate_limit_rpm"],
        "status": row["status"],
        "created_at": row["created_at"],
        "revoked_at": row["revoked_at"],
        "last_used_at": row["last_used_at"],
    }
    if plaintext is not None:
        record["key"] = plaintext
    return record
