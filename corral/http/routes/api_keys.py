"""Self-service API keys: create (plaintext once), list the caller's, revoke."""

from __future__ import annotations

from typing import Annotated

from corral.actors import tenancy
from corral.actors.tenancy import api_keys, store
from corral.actors.tenancy.scopes import PRODUCT_SCOPES
from corral.errors import forbidden, validation_error
from corral.models import Rule, model

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router

router = Router("api-keys")


def _limits_by_type() -> dict[str, object]:
    """A key's rate limit is at most its type's default; only a platform key names a workspace."""
    rules: list[dict[str, object]] = [
        {"if": {"properties": {"key_type": {"const": kind}}}, "then": {"properties": {"rate_limit_rpm": {"maximum": api_keys.DEFAULT_RPM[kind]}}}}
        for kind in api_keys.PUBLIC_KEY_TYPES
    ]
    rules.append(
        {"if": {"not": {"required": ["key_type"], "properties": {"key_type": {"const": "platform"}}}},
         "then": {"properties": {"workspace_id": {"type": "null"}}}}
    )
    return {"allOf": rules}


@model(missing="details", schema=_limits_by_type())
class CreateKey:
    name: Annotated[str, Rule(max_length=100)]
    key_type: Annotated[str, Rule(message="must be user or platform", schema={"enum": list(api_keys.PUBLIC_KEY_TYPES)})] = "user"
    scopes: Annotated[list[str] | None, Rule(schema={"items": {"enum": list(PRODUCT_SCOPES)}})] = None
    rate_limit_rpm: Annotated[int | None, Rule(minimum=1)] = None
    # Checked after the key type (an id that is not a UUID is `400 INVALID_ID`).
    workspace_id: Annotated[str | None, Rule(description="restricts a platform key to one workspace", schema={"format": "uuid"})] = None


@router.post(
    "/api-keys",
    summary="Create a user or platform key; the plaintext key is in this response only",
    scope="keys:write",
    action="api_keys.create",
    status=201,
    request=CreateKey,
)
async def create_key(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    body = await ctx.body(CreateKey)
    key_type, rpm, workspace_id = body.key_type, body.rate_limit_rpm, body.workspace_id
    if key_type == "admin":
        raise api_keys.admin_key_refused()
    if key_type not in api_keys.PUBLIC_KEY_TYPES:
        raise validation_error({"key_type": "must be user or platform"})
    tenant_id = ctx.tenant_id
    if principal.user_id is None:
        raise forbidden("keys are created for a user; use /admin/api-keys")
    if key_type == "platform" and not principal.is_tenant_admin:
        raise forbidden("platform keys can be created only by tenant owners and admins")
    if principal.workspace_id is not None:  # a restricted key makes only keys as narrow as itself
        if key_type != "platform" or workspace_id not in (None, principal.workspace_id):
            raise forbidden("this key is restricted to one workspace; so are the keys it creates")
        workspace_id = principal.workspace_id
    if rpm is not None and rpm > api_keys.DEFAULT_RPM[key_type]:
        raise validation_error({"rate_limit_rpm": f"must be at most {api_keys.DEFAULT_RPM[key_type]}"})
    if workspace_id is not None:
        if key_type != "platform":
            raise validation_error({"workspace_id": "only platform keys are restricted to a workspace"})
        require_uuid(workspace_id, "workspace id")
        if not await store.workspaces.exists(ctx.db, tenant_id, workspace_id):
            raise validation_error({"workspace_id": "no such workspace in this tenant"})
    scopes = api_keys.validate_scopes(body.scopes, principal.scopes)
    key, plaintext = await api_keys.create_api_key(
        ctx.db,
        tenant_id=tenant_id,
        user_id=principal.user_id,
        name=body.name,
        key_type=key_type,
        scopes=scopes,
        workspace_id=workspace_id,
        rate_limit_rpm=rpm,
    )
    ctx.audit.update(resource_type="api_key", resource_id=key.id, workspace_id=workspace_id)
    return data(tenancy.api_key_public(key, plaintext), 201)


@router.get("/api-keys", summary="The caller's keys (never their plaintext)", scope="keys:read")
async def list_keys(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    keys = await api_keys.list_user_keys(ctx.db, ctx.tenant_id, principal.user_id)
    if principal.workspace_id is not None:
        keys = [key for key in keys if key.workspace_id == principal.workspace_id]
    return data([tenancy.api_key_public(key) for key in keys])


@router.delete(
    "/api-keys/{id}",
    summary="Revoke a key: irreversible, refused from the next request on",
    scope="keys:write",
    action="api_keys.revoke",
)
async def revoke_key(ctx: RequestContext, id: str) -> Reply:
    key_id = require_uuid(id, "api key id")
    principal = ctx.principal
    key = await api_keys.revoke_api_key(
        ctx.db, ctx.tenant_id, key_id, principal.user_id, principal.is_tenant_admin, principal.workspace_id,
        ctx.platform.notices,
    )
    ctx.audit.update(resource_type="api_key", resource_id=key_id)
    return data(tenancy.api_key_public(key))
