"""Operator endpoints (contract §2): tenants, users, keys, actors, outbox; the node's
live picture (contract §19, the operator views)."""

from __future__ import annotations

from typing import Annotated, Literal

from corral.actors import billing, node_status, nodes, tenancy
from corral.actors.tenancy import api_keys, store
from corral.actors.tenancy.scopes import PRODUCT_SCOPES
from corral.errors import not_found, validation_error
from corral.models import Rule, model

from ..context import RequestContext
from ..replies import Reply, data
from ..request_window import request_window
from ..routing import Router

router = Router("admin")


def _email_problem(value: str) -> str | None:
    return None if "@" in value and not value.startswith("@") and not value.endswith("@") else "must be an email address"


Email = Annotated[str, Rule(max_length=254, check=_email_problem, format="email")]
Password = Annotated[str, Rule(strip=False, min_length=8, max_length=1024)]
Uuid = Annotated[str, Rule(format="uuid")]


@model(missing="details")
class CreateTenant:
    """A tenant, its owner and an initial grant of credits (default: the node's setting)."""

    name: Annotated[str, Rule(max_length=255)]
    owner_email: Email
    owner_password: Password
    credits: Annotated[int | None, Rule(minimum=0)] = None


@model(missing="details")
class CreateUser:
    email: Email
    password: Password
    name: Annotated[str | None, Rule(max_length=255)] = None
    tenant_id: Uuid | None = None
    role: Literal[tenancy.TENANT_ROLES] = "member"  # type: ignore[valid-type]


@model(missing="details")
class CreateKey:
    tenant_id: Uuid
    name: Annotated[str, Rule(max_length=255)]
    key_type: Literal["user", "platform", "admin"]
    user_id: Uuid | None = None
    workspace_id: Uuid | None = None
    scopes: Annotated[list[str] | None, Rule(schema={"items": {"enum": list(PRODUCT_SCOPES)}})] = None
    allowed_ips: Annotated[
        list[str] | None, Rule(schema={"items": {"anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}}, description="addresses or CIDR blocks")
    ] = None


@router.post(
    "/admin/tenants",
    summary="Create a tenant with its owner, default workspace and project, and a user key",
    auth="admin",
    action="tenants.create",
    status=201,
    request=CreateTenant,
)
async def create_tenant(ctx: RequestContext) -> Reply:
    body = await ctx.body(CreateTenant)
    created = await tenancy.create_tenant(ctx.db, body.name, body.owner_email, body.owner_password)
    ctx.audit.update(tenant_id=created.tenant.id, resource_type="tenant", resource_id=created.tenant.id)
    credits = body.credits
    if credits is None:  # docs/api.md: a tenant created without `credits` gets the default grant
        credits = ctx.platform.settings.default_tenant_credits
    if credits:
        await billing.grant_credits(ctx.platform, created.tenant.id, credits, "initial credits")
    key, plaintext = await api_keys.create_api_key(
        ctx.db,
        tenant_id=created.tenant.id,
        user_id=created.owner.id,
        name="owner key",
        key_type="user",
        scopes=list(tenancy.PRODUCT_SCOPES),
    )
    return data(
        {
            "tenant": tenancy.tenant_public(created.tenant),
            "owner": {"id": created.owner.id, "email": created.owner.email},
            "workspace": tenancy.workspace_public(created.workspace),
            "project": tenancy.project_public(created.project),
            "api_key": tenancy.api_key_public(key, plaintext),
        },
        201,
    )


@router.get("/admin/tenants", summary="List every tenant", auth="admin")
async def list_tenants(ctx: RequestContext) -> Reply:
    return data([tenancy.tenant_public(tenant) for tenant in await tenancy.list_tenants(ctx.db)])


@router.post(
    "/admin/users",
    summary="Create a user, optionally joining a tenant with a role",
    auth="admin",
    action="users.create",
    status=201,
    request=CreateUser,
)
async def create_user(ctx: RequestContext) -> Reply:
    body = await ctx.body(CreateUser)
    user = await tenancy.create_user(ctx.db, body.email, body.password, body.name, body.tenant_id, body.role)
    ctx.audit.update(tenant_id=body.tenant_id, resource_type="user", resource_id=user.id)
    return data({"user": tenancy.user_public(user)}, 201)


@router.post(
    "/admin/api-keys",
    summary="Create an API key of any type, optionally restricted to source addresses",
    auth="admin",
    action="api_keys.create",
    status=201,
    request=CreateKey,
)
async def create_key(ctx: RequestContext) -> Reply:
    body = await ctx.body(CreateKey)
    tenant_id, user_id, workspace_id = body.tenant_id, body.user_id, body.workspace_id
    if await tenancy.get_tenant(ctx.db, tenant_id) is None:
        raise not_found("tenant not found")
    if user_id is not None and await tenancy.tenant_role(ctx.db, tenant_id, user_id) is None:
        raise validation_error({"user_id": "not a member of this tenant"})
    if workspace_id is not None and not await store.workspaces.exists(ctx.db, tenant_id, workspace_id):
        raise validation_error({"workspace_id": "no such workspace in this tenant"})
    scopes = api_keys.validate_scopes(body.scopes, None)
    allowed_ips = api_keys.validate_allowed_ips(body.allowed_ips)
    key, plaintext = await api_keys.create_api_key(
        ctx.db,
        tenant_id=tenant_id,
        user_id=user_id,
        name=body.name,
        key_type=body.key_type,
        scopes=scopes,
        allowed_ips=allowed_ips,
        workspace_id=workspace_id,
    )
    ctx.audit.update(tenant_id=tenant_id, resource_type="api_key", resource_id=key.id)
    return data(tenancy.api_key_public(key, plaintext), 201)


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


@router.get(
    "/admin/node",
    summary="This node's live picture: name, uptime, capacity, load, actors, warm pool, request rate",
    auth="admin",
)
async def show_node(ctx: RequestContext) -> Reply:
    picture = await node_status.describe_node(ctx.platform)
    ctx.platform.request_observers.drain()  # the requests answered until now, this one's excepted
    window = request_window(ctx.platform.request_observers)
    picture["node"].update(window.started())
    picture["requests"] = window.summary()
    return data(picture)


@router.get(
    "/admin/nodes",
    summary="The cluster's nodes: address, region, state (active, draining, lost), capacity, load",
    auth="admin",
)
async def list_nodes(ctx: RequestContext) -> Reply:
    return data(await nodes.describe(ctx.platform.db))


@model
class DrainNode:
    """What the drain moves to other nodes (docs/api.md "Drain"): nothing, the stopped
    sandboxes and computers (the default), or the running ones too (stopped, moved,
    started)."""

    move: Literal["none", "stopped", "all"] = "stopped"


@router.post(
    "/admin/nodes/{name}/drain",
    summary="Place no new work on a node (until it restarts) and move its sandboxes and computers; answers the node, draining",
    auth="admin",
    request=DrainNode,
)
async def drain_node(ctx: RequestContext, name: str) -> Reply:
    body = await ctx.body(DrainNode)
    return data(await nodes.drain(ctx.platform, name, body.move))
