"""Operator endpoints (contract §2): tenants, users, keys, actors, outbox."""

from __future__ import annotations

from corral.actors import billing, tenancy
from corral.actors.tenancy import api_keys
from corral.errors import not_found, validation_error
from corral.ids import is_uuid

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router
from ..validation import Fields

router = Router("admin")

EMAIL_FIELD = {"type": "string", "format": "email"}


def _email(fields: Fields, name: str) -> str | None:
    value = fields.string(name, required=True, max_length=254)
    if value is not None and ("@" not in value or value.startswith("@") or value.endswith("@")):
        fields.errors[name] = "must be an email address"
    return value


def _password(fields: Fields, name: str) -> str | None:
    value = fields.body.get(name)
    if not isinstance(value, str) or len(value) < 8:
        fields.errors[name] = "must be a string of at least 8 characters"
        return None
    if len(value) > 1024:
        fields.errors[name] = "must be at most 1024 characters"
        return None
    return value


@router.post(
    "/admin/tenants",
    summary="Create a tenant with its owner, default workspace and project, and a user key",
    auth="admin",
    action="tenants.create",
    status=201,
    request={
        "type": "object",
        "required": ["name", "owner_email", "owner_password"],
        "properties": {"name": {"type": "string"}, "owner_email": EMAIL_FIELD, "owner_password": {"type": "string"}, "credits": {"type": "integer"}},
    },
)
async def create_tenant(ctx: RequestContext) -> Reply:
    fields = Fields(await ctx.json())
    name = fields.string("name", required=True)
    email = _email(fields, "owner_email")
    password = _password(fields, "owner_password")
    credits = fields.integer("credits", minimum=0)
    fields.check()
    assert name and email and password
    created = await tenancy.create_tenant(ctx.db, name, email, password)
    ctx.audit.update(tenant_id=created.tenant["id"], resource_type="tenant", resource_id=created.tenant["id"])
    if credits is None:  # docs/api.md: a tenant created without `credits` gets the default grant
        credits = ctx.platform.settings.default_tenant_credits
    if credits:
        await billing.grant_credits(ctx.platform, created.tenant["id"], credits, "initial credits")
    key_row, plaintext = await api_keys.create_api_key(
        ctx.db,
        tenant_id=created.tenant["id"],
        user_id=created.owner["id"],
        name="owner key",
        key_type="user",
        scopes=list(tenancy.PRODUCT_SCOPES),
    )
    return data(
        {
            "tenant": tenancy.tenant_public(created.tenant),
            "owner": {"id": created.owner["id"], "email": created.owner["email"]},
            "workspace": tenancy.workspace_public(created.workspace),
            "project": tenancy.project_public(created.project),
            "api_key": tenancy.api_key_public(key_row, plaintext),
        },
        201,
    )


@router.get("/admin/tenants", summary="List every tenant", auth="admin")
async def list_tenants(ctx: RequestContext) -> Reply:
    return data([tenancy.tenant_public(row) for row in await tenancy.list_tenants(ctx.db)])


@router.post(
    "/admin/users",
    summary="Create a user, optionally joining a tenant with a role",
    auth="admin",
    action="users.create",
    status=201,
    request={
        "type": "object",
        "required": ["email", "password"],
        "properties": {
            "email": EMAIL_FIELD,
            "password": {"type": "string"},
            "name": {"type": "string"},
            "tenant_id": {"type": "string", "format": "uuid"},
            "role": {"enum": list(tenancy.TENANT_ROLES)},
        },
    },
)
async def create_user(ctx: RequestContext) -> Reply:
    fields = Fields(await ctx.json())
    email = _email(fields, "email")
    password = _password(fields, "password")
    name = fields.string("name")
    tenant_id = fields.string("tenant_id")
    role = fields.choice("role", tenancy.TENANT_ROLES, default="member")
    if tenant_id is not None and not is_uuid(tenant_id):
        fields.errors["tenant_id"] = "must be a UUID"
    fields.check()
    assert email and password and role
    user = await tenancy.create_user(ctx.db, email, password, name, tenant_id, role)
    ctx.audit.update(tenant_id=tenant_id, resource_type="user", resource_id=user["id"])
    return data({"user": tenancy.user_public(user)}, 201)


@router.post(
    "/admin/api-keys",
    summary="Create an API key of any type, optionally restricted to source addresses",
    auth="admin",
    action="api_keys.create",
    status=201,
    request={
        "type": "object",
        "required": ["tenant_id", "name", "key_type"],
        "properties": {
            "tenant_id": {"type": "string", "format": "uuid"},
            "user_id": {"type": "string", "format": "uuid"},
            "name": {"type": "string"},
            "key_type": {"enum": ["user", "platform", "admin"]},
            "scopes": {"type": "array", "items": {"type": "string"}},
            "allowed_ips": {"type": "array", "items": {"type": "string"}},
            "workspace_id": {"type": "string", "format": "uuid"},
        },
    },
)
async def create_key(ctx: RequestContext) -> Reply:
    body = await ctx.json()
    fields = Fields(body)
    tenant_id = fields.string("tenant_id", required=True)
    user_id = fields.string("user_id")
    name = fields.string("name", required=True)
    key_type = fields.choice("key_type", ("user", "platform", "admin"), required=True)
    workspace_id = fields.string("workspace_id")
    for field_name, value in (("tenant_id", tenant_id), ("user_id", user_id), ("workspace_id", workspace_id)):
        if value is not None and not is_uuid(value):
            fields.errors[field_name] = "must be a UUID"
    fields.check()
    assert tenant_id and name and key_type
    if await tenancy.get_tenant(ctx.db, tenant_id) is None:
        raise not_found("tenant not found")
    if user_id is not None and await tenancy.tenant_role(ctx.db, tenant_id, user_id) is None:
        raise validation_error({"user_id": "not a member of this tenant"})
    if workspace_id is not None and not await ctx.db.fetch_one(
        "SELECT 1 FROM workspaces WHERE id = ? AND tenant_id = ?", (workspace_id, tenant_id)
    ):
        raise validation_error({"workspace_id": "no such workspace in this tenant"})
    scopes = api_keys.validate_scopes(body.get("scopes"), None)
    allowed_ips = api_keys.validate_allowed_ips(body.get("allowed_ips"))
    row, plaintext = await api_keys.create_api_key(
        ctx.db,
        tenant_id=tenant_id,
        user_id=user_id,
        name=name,
        key_type=key_type,
        scopes=scopes,
        allowed_ips=allowed_ips,
        workspace_id=workspace_id,
    )
    ctx.audit.update(tenant_id=tenant_id, resource_type="api_key", resource_id=row["id"])
    return data(tenancy.api_key_public(row, plaintext), 201)


@router.get("/admin/outbox", summary="Every e-mail the platform sent or would send, newest first", auth="admin")
async def outbox(ctx: RequestContext) -> Reply:
    return data(await tenancy.outbox.list_mail(ctx.db))


@router.get(
    "/admin/actors",
    summary="Live actors: kind, id, state, mailbox depth, restarts, last error, age",
    auth="admin",
    query={"kind": "only actors of this kind"},
)
async def list_actors(ctx: RequestContext) -> Reply:
    return data(ctx.platform.system.introspect(ctx.query("kind")))


@router.get("/admin/actors/{kind}/{id}", summary="One live actor", auth="admin")
async def show_actor(ctx: RequestContext, kind: str, id: str) -> Reply:
    found = ctx.platform.system.introspect_one(kind, id)
    if found is None:
        raise not_found("actor not found")
    return data(found)
