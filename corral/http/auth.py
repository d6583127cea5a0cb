"""Authentication: a bearer API key or JWT becomes a `Principal`, or a 401.

Keys are looked up by digest, through the store's cache, which holds a key only while
the store is unchanged (`tenancy.store.api_keys.KeyCache`): a revoked key is refused
on its next request.
"""

from __future__ import annotations

import ipaddress
import time

from corral.actors import browser_tokens
from corral.actors.tenancy import KeyWithMember, api_keys, store, tickets
from corral.errors import ApiError, forbidden, unauthorized
from corral.node import Platform

from . import tokens
from .principal import Principal

_KIND_BY_TYPE = {"user": "user_key", "platform": "platform_key", "admin": "admin_key"}
_LAST_USED_EVERY = 60.0


class Authenticator:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self._last_used_written: dict[str, float] = {}

    async def authenticate(self, authorization: str | None, client_ip: str | None) -> Principal:
        if not authorization:
            raise unauthorized("Authorization header missing")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("Authorization header must be 'Bearer <token>'")
        if token.startswith("msk_"):
            return await self._from_key(token, client_ip)
        if token.startswith(browser_tokens.PREFIX):
            return await self._from_browser_token(token)
        return await self._from_jwt(token)

    async def _from_key(self, token: str, client_ip: str | None) -> Principal:
        platform = self.platform
        if token.startswith("msk_a_") and platform.is_bootstrap_admin_key(token):
            return Principal("operator", None, None, None, None, None, 30_000)
        key = await api_keys.find_with_member(platform.db, token)
        return await self._key_principal(key, client_ip)

    async def _from_browser_token(self, token: str) -> Principal:
        """A browser token acts for its minter, within one sandbox and its sandbox scopes."""
        grant = await browser_tokens.authenticate(self.platform.db, token)
        return Principal(
            kind="browser_token",
            tenant_id=grant.tenant_id,
            user_id=grant.user_id,
            api_key_id=grant.api_key_id,
            scopes=grant.scopes,
            tenant_role="member",
            rate_limit_rpm=600,
            workspace_id=grant.workspace_id,
            sandbox_id=grant.sandbox_id,
        )

    async def from_ticket(self, ticket: str, client_ip: str | None, purposes: tuple[str, ...] = ("sse",)) -> Principal:
        """The principal that minted an SSE ticket, consuming the ticket.

        Only a ticket minted for one of `purposes` is taken (others stay unused). The
        credential behind it is checked again: a key revoked, or a member removed,
        since the ticket was minted is refused. Scopes are the minting credential's."""
        grant = await tickets.consume_ticket(self.platform.db, ticket, purposes)
        try:
            if grant is None:
                raise unauthorized("invalid, used or expired SSE ticket; mint a new one at POST /auth/sse-ticket")
            if grant.api_key_id is not None:
                key = await api_keys.find_with_member_by_id(self.platform.db, grant.api_key_id)
                return await self._key_principal(key, client_ip)
            if grant.user_id is None:
                raise unauthorized("invalid SSE ticket")
            return await self._session_principal(grant.tenant_id, grant.user_id)
        except ApiError as error:
            if error.status != 401:
                raise
            raise unauthorized(error.message, code="UNAUTHORIZED") from None  # the spec's SSE code

    async def _key_principal(self, key: KeyWithMember | None, client_ip: str | None) -> Principal:
        if key is None or key.status != "active":
            raise unauthorized("invalid or revoked API key")
        if key.allowed_ips is not None:
            _check_ip(key.allowed_ips, client_ip)
        tenant_role = None
        email = None
        if key.user_id:
            if key.member_role is None:
                raise unauthorized("the key's user is no longer a member of its tenant")
            tenant_role, email = key.member_role, key.member_email
        elif key.key_type in ("platform", "admin"):
            tenant_role = "admin"  # an operator-made key without a user: tenant-wide automation
        await self._touch(key.id)
        return Principal(
            kind=_KIND_BY_TYPE[key.key_type],
            tenant_id=key.tenant_id,
            user_id=key.user_id,
            api_key_id=key.id,
            scopes=frozenset(key.scopes),
            tenant_role=tenant_role,
            rate_limit_rpm=int(key.rate_limit_rpm),
            workspace_id=key.workspace_id,
            email=email,
        )

    async def _from_jwt(self, token: str) -> Principal:
        claims = tokens.decode(self.platform.jwt_secret, token)
        if claims.token_type != "access":
            raise unauthorized("refresh tokens are accepted only at /auth/refresh")
        if not claims.tenant_id:
            return await self._tenantless_principal(claims.user_id)
        return await self._session_principal(claims.tenant_id, claims.user_id)

    async def _tenantless_principal(self, user_id: str) -> Principal:
        """The session of a user who belongs to no tenant yet (login issues one so that they
        can accept an invite); every tenant route answers it 422 TENANT_RESOLUTION_FAILED."""
        user = await store.users.load(self.platform.db, user_id)
        if user is None:
            raise unauthorized("the session's user no longer exists")
        return Principal("session", None, user_id, None, None, None, 600, email=user.email)

    async def _session_principal(self, tenant_id: str, user_id: str) -> Principal:
        member = await store.tenant_members.with_email(self.platform.db, tenant_id, user_id)
        if member is None:
            raise unauthorized("the session's user is no longer a member of its tenant")
        return Principal(
            kind="session",
            tenant_id=tenant_id,
            user_id=user_id,
            api_key_id=None,
            scopes=None,
            tenant_role=member.role,
            rate_limit_rpm=600,
            email=member.email,
        )

    async def _touch(self, key_id: str) -> None:
        """Record `last_used_at` at most once a minute per key, to keep writes off the hot path."""
        now = time.monotonic()
        if now - self._last_used_written.get(key_id, -_LAST_USED_EVERY) < _LAST_USED_EVERY:
            return
        self._last_used_written[key_id] = now
        await api_keys.mark_used(self.platform.db, key_id)


def _check_ip(allowed: list[str], client_ip: str | None) -> None:
    if client_ip is None:
        raise forbidden("this key is restricted to certain source addresses")
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError as exc:
        raise forbidden("this key is restricted to certain source addresses") from exc
    if not any(address in ipaddress.ip_network(net, strict=False) for net in allowed):
        raise ApiError(403, "FORBIDDEN", f"source address {client_ip} is not allowed for this key")
