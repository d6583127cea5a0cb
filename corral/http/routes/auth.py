"""Sessions: JWT login and refresh, and single-use SSE tickets."""

from __future__ import annotations

from typing import Annotated, Any

from corral.actors import browser_tokens
from corral.actors.tenancy import UserRecord, store, tickets, verify_password
from corral.errors import ApiError, unauthorized
from corral.ids import is_uuid
from corral.models import Rule, model

from .. import tokens
from ..context import RequestContext
from ..replies import Reply
from ..routing import Router

router = Router("auth")

# Credentials are `Any` on purpose: a malformed one is the same 401 as a wrong one.
Credential = Annotated[Any, Rule(strip=False, schema={"type": "string"})]


@model
class Login:
    email: Annotated[Any, Rule(schema={"type": "string", "format": "email"})]
    password: Credential
    tenant_id: Annotated[Any, Rule(schema={"type": "string", "format": "uuid"})] = None


@model
class Refresh:
    refresh_token: Credential


def _bad_credentials() -> ApiError:
    return ApiError(401, "UNAUTHORIZED", "invalid email or password")


def _session(ctx: RequestContext, user: UserRecord, tenant_id: str | None) -> dict[str, Any]:
    """Tokens for the user in `tenant_id`; `None` for a user in no tenant yet (the session
    can accept invites and nothing else; its tokens carry an empty tenant claim)."""
    settings = ctx.platform.settings
    secret = ctx.platform.jwt_secret
    return {
        "token": tokens.mint(secret, user_id=user.id, tenant_id=tenant_id or "", token_type="access", ttl=settings.access_token_ttl),
        "refresh_token": tokens.mint(
            secret, user_id=user.id, tenant_id=tenant_id or "", token_type="refresh", ttl=settings.refresh_token_ttl
        ),
        "token_type": "Bearer",
        "expires_in": settings.access_token_ttl,
        "tenant_id": tenant_id,
        "user": {"id": user.id, "email": user.email},
    }


@router.post(
    "/auth/login",
    summary="Exchange an email and password for an access token (about 1 h) and a refresh token (7 days)",
    auth="public_auth",
    request=Login,
)
async def login(ctx: RequestContext) -> Reply:
    body = await ctx.body(Login)
    email, password, tenant_id = body.email, body.password, body.tenant_id
    if not isinstance(email, str) or not isinstance(password, str):
        raise _bad_credentials()
    user = await store.users.by_email(ctx.db, email.strip())
    if not await verify_password(user.password_hash if user else None, password) or user is None:
        raise _bad_credentials()
    if tenant_id is not None:
        if not isinstance(tenant_id, str) or not is_uuid(tenant_id):
            raise _bad_credentials()
        member = await store.tenant_members.role(ctx.db, tenant_id, user.id) is not None
        chosen = tenant_id if member else None
    else:
        chosen = await store.tenant_members.first_tenant(ctx.db, user.id)
    if chosen is None and tenant_id is None:
        return Reply(_session(ctx, user, None))  # in no tenant yet: a session to accept invites with
    if chosen is None:
        raise ApiError(422, "TENANT_RESOLUTION_FAILED", "tenant cannot be determined for the caller")
    return Reply(_session(ctx, user, chosen))


@router.post(
    "/auth/refresh",
    summary="Exchange a refresh token for a new access token and a new refresh token",
    auth="public_auth",
    request=Refresh,
)
async def refresh(ctx: RequestContext) -> Reply:
    token = (await ctx.body(Refresh)).refresh_token
    if not isinstance(token, str):
        raise unauthorized("invalid refresh token")
    claims = tokens.decode(ctx.platform.jwt_secret, token)
    if claims.token_type != "refresh":
        raise unauthorized("not a refresh token")
    if not claims.tenant_id:
        return Reply(await _refresh_tenantless(ctx, claims.user_id))
    user = await store.users.member_of(ctx.db, claims.user_id, claims.tenant_id)
    if user is None:
        raise unauthorized("the session's user is no longer a member of its tenant")
    return Reply(_session(ctx, user, claims.tenant_id))


async def _refresh_tenantless(ctx: RequestContext, user_id: str) -> dict[str, Any]:
    """A session without a tenant moves into the user's oldest tenant once they have one
    (after accepting an invite), as a new login would."""
    user = await store.users.load(ctx.db, user_id)
    if user is None:
        raise unauthorized("the session's user no longer exists")
    return _session(ctx, user, await store.tenant_members.first_tenant(ctx.db, user_id))


@router.post(
    "/auth/sse-ticket",
    summary="Mint a single-use SSE ticket valid for 60 seconds (a browser token's opens only its sandbox's streams)",
)
async def sse_ticket(ctx: RequestContext) -> Reply:
    principal = ctx.principal
    ttl = ctx.platform.settings.sse_ticket_ttl
    ticket = await tickets.mint_ticket(
        ctx.db,
        tenant_id=ctx.tenant_id,
        user_id=principal.user_id,
        api_key_id=principal.api_key_id,
        scopes=principal.scopes,
        ttl_seconds=ttl,
        purpose=browser_tokens.ticket_purpose(principal.sandbox_id) if principal.sandbox_id else "sse",
    )
    return Reply({"ticket": ticket, "expires_in": ttl})
