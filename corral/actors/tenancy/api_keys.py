"""API keys: created with their plaintext shown once, stored as SHA-256 digests.

Revocation is a status change; authentication's cache (`store.api_keys.KeyCache`)
holds a key only while the store is unchanged (SQLite), or for at most a second
(PostgreSQL), so a revoked key is refused on its next request on the node that
revoked it, and on the others once they hear of it (`hear_revocations`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
from typing import Any

from corral.errors import ApiError, forbidden, not_found, validation_error
from corral.ids import new_uuid, random_token
from corral.storage import Database, Notices, utc_now_iso

from . import store
from .scopes import PRODUCT_SCOPES, unknown_scopes
from .store import ApiKeyRecord, KeyWithMember

KEY_PREFIXES = {"user": "msk_u_", "platform": "msk_p_", "admin": "msk_a_"}
DEFAULT_RPM = {"user": 600, "platform": 30_000, "admin": 30_000}
PUBLIC_KEY_TYPES = ("user", "platform")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_type_of(token: str) -> str | None:
    for key_type, prefix in KEY_PREFIXES.items():
        if token.startswith(prefix):
            return key_type
    return None


def validate_scopes(value: Any, ceiling: frozenset[str] | None) -> list[str]:
    """The requested scope list, checked against the known list and the creator's own scopes."""
    if value is None:
        scopes = list(PRODUCT_SCOPES if ceiling is None else sorted(ceiling))
    elif not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise validation_error({"scopes": "must be a list of scope strings"})
    else:
        scopes = list(dict.fromkeys(value))
    unknown = unknown_scopes(scopes)
    if unknown:
        raise validation_error({"scopes": f"unknown scopes: {', '.join(unknown)}"})
    if ceiling is not None and not set(scopes) <= ceiling:
        extra = sorted(set(scopes) - ceiling)
        raise forbidden(f"a key cannot grant scopes its creator lacks: {', '.join(extra)}", "insufficient_scope")
    return scopes


def validate_allowed_ips(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise validation_error({"allowed_ips": "must be a list of IP addresses or CIDR blocks"})
    for entry in value:
        try:
            ipaddress.ip_network(str(entry), strict=False)
        except ValueError as exc:
            raise validation_error({"allowed_ips": f"{entry!r} is not an IP address or CIDR block"}) from exc
    return [str(v) for v in value]


async def create_api_key(
    db: Database,
    *,
    tenant_id: str,
    user_id: str | None,
    name: str,
    key_type: str,
    scopes: list[str],
    allowed_ips: list[str] | None = None,
    workspace_id: str | None = None,
    rate_limit_rpm: int | None = None,
) -> tuple[ApiKeyRecord, str]:
    """Returns the stored key and the plaintext key, which is never stored or shown again."""
    plaintext = KEY_PREFIXES[key_type] + random_token(32)
    key = ApiKeyRecord(
        id=new_uuid(),
        tenant_id=tenant_id,
        user_id=user_id,
        name=name,
        key_type=key_type,
        key_purpose="api",
        key_prefix=plaintext[:12],
        key_digest=digest(plaintext),
        scopes=scopes,
        allowed_ips=allowed_ips,
        workspace_id=workspace_id,
        rate_limit_rpm=rate_limit_rpm or DEFAULT_RPM[key_type],
        status="active",
        created_at=utc_now_iso(),
        revoked_at=None,
        last_used_at=None,
    )
    await store.api_keys.create(db, key)
    return key, plaintext


async def find_with_member(db: Database, token: str) -> KeyWithMember | None:
    """The key with its user's tenant role and e-mail (`member_role`, `member_email`),
    in one query: this runs on every key-authenticated request."""
    return await store.api_keys.with_member_by_digest(db, digest(token))


async def find_with_member_by_id(db: Database, key_id: str) -> KeyWithMember | None:
    """As `find_with_member`, by key id (an SSE ticket remembers the key that minted it)."""
    return await store.api_keys.with_member_by_id(db, key_id)


async def list_user_keys(db: Database, tenant_id: str, user_id: str | None) -> list[ApiKeyRecord]:
    return await store.api_keys.list_for_user(db, tenant_id, user_id)


KEYS_REVOKED = "api_keys.revoked"
"""The notice (`corral.storage.Notices`) a node sends the others when it revoked a key."""


def hear_revocations(notices: Notices, db: Database) -> None:
    """Another node revoked a key (or the notices were cut off for a while): this node's
    cache of keys read from `db` forgets them all."""
    notices.listen(KEYS_REVOKED, lambda _: store.api_keys.key_cache(db).forget_all())


async def revoke_api_key(
    db: Database, tenant_id: str, key_id: str, user_id: str | None, may_revoke_any: bool, workspace_id: str | None = None,
    notices: Notices | None = None,
) -> ApiKeyRecord:
    """`workspace_id`: the revoking key's restriction; it reaches only keys restricted to
    the same workspace. `notices`: the other nodes are told (their caches forget it)."""
    key = await store.api_keys.find(db, tenant_id, key_id)
    if key is None or (not may_revoke_any and key.user_id != user_id):
        raise not_found("api key not found")
    if workspace_id is not None and key.workspace_id != workspace_id:
        raise not_found("api key not found")
    if key.status != "revoked":
        now = utc_now_iso()
        await store.api_keys.revoke(db, key_id, now)
        if notices is not None:
            notices.tell_others(KEYS_REVOKED, key_id)
        key = dataclasses.replace(key, status="revoked", revoked_at=now)
    return key


async def mark_used(db: Database, key_id: str) -> None:
    """Record that the key authenticated a request now (`last_used_at`)."""
    await store.api_keys.mark_used(db, key_id)


def admin_key_refused() -> ApiError:
    return forbidden("admin keys are created by the operator, not through /api-keys")
