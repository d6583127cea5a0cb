"""Preview tokens and share links of a sandbox.

Both open every exposed port of their one sandbox (the cookie a browser gets is
per host, so per port). A preview token is for the developer and their tools (1 h
by default, at most 24 h); a share link is for anyone who has it, lives as long as
asked (or forever), and is revoked by deleting it.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from corral.actors.sandboxes import SandboxRecord
from corral.errors import ApiError, not_found
from corral.ids import prefixed
from corral.storage import iso_in, to_iso, utc_now_iso

from . import domains, store
from .access import forget_share, preview_key
from .requests import PREVIEW_TOKEN_DEFAULT_TTL, PreviewTokenRequest, ShareRequest
from .services import PreviewServices
from .store import ShareRecord
from .tokens import new_share_token, share_digest, sign_preview_token
from .urls import share_url

SHARE_ID = re.compile(r"^shr_[0-9a-z]{26}$")
SHARE_FIELDS = ("id", "sandbox_id", "port", "expires_at", "created_at")


async def mint_preview_token(platform: PreviewServices, sandbox: SandboxRecord, request: PreviewTokenRequest) -> dict[str, Any]:
    ttl = PREVIEW_TOKEN_DEFAULT_TTL if request.expires_in is None else request.expires_in
    expires_at = int(time.time()) + ttl
    token = sign_preview_token(preview_key(platform.jwt_secret), sandbox.id, expires_at)
    return {"token": token, "expires_at": to_iso(datetime.fromtimestamp(expires_at, UTC)), "sandbox_id": sandbox.id}


async def _url(platform: PreviewServices, sandbox: SandboxRecord, port: int | None, token: str | None = None) -> str | None:
    port = port if port is not None else await store.latest_port(platform.db, sandbox.id)
    if port is None:
        return None
    domain = await domains.url_domain(platform.db, platform.settings, sandbox.tenant_id, sandbox.workspace_id, sandbox.project_id)
    url = share_url(platform.settings, port, sandbox.slug, domain, token or "")
    return url if token else url.removesuffix("/?ms=")


def share_public(share: ShareRecord, url: str | None) -> dict[str, Any]:
    return {**{name: getattr(share, name) for name in SHARE_FIELDS}, "token_prefix": share.token_prefix, "url": url}


async def create_share(platform: PreviewServices, sandbox: SandboxRecord, user_id: str | None, request: ShareRequest) -> dict[str, Any]:
    ttl, port = request.expires_in, request.port
    token = new_share_token()
    share = ShareRecord(
        id=prefixed("shr"),
        tenant_id=sandbox.tenant_id,
        sandbox_id=sandbox.id,
        token_digest=share_digest(token),
        token_prefix=token[:10],
        port=port,
        expires_at=iso_in(ttl) if ttl is not None else None,
        created_by=user_id,
        created_at=utc_now_iso(),
        revoked_at=None,
    )
    await store.insert_share(platform.db, share)
    return {**share_public(share, await _url(platform, sandbox, port, token)), "token": token}


async def list_shares(platform: PreviewServices, sandbox: SandboxRecord) -> list[dict[str, Any]]:
    """Shares not revoked, newest first; their URLs without the token (it is not stored)."""
    return [share_public(share, await _url(platform, sandbox, share.port)) for share in await store.live_shares(platform.db, sandbox.id)]


async def revoke_share(platform: PreviewServices, sandbox: SandboxRecord, share_id: str) -> dict[str, Any]:
    if not SHARE_ID.match(share_id):
        raise ApiError(400, "INVALID_ID", "invalid share id")
    now = utc_now_iso()
    if not await store.revoke_share(platform.db, sandbox.id, share_id, now):
        raise not_found("share not found")
    forget_share(platform, share_id)
    return {"id": share_id, "sandbox_id": sandbox.id, "revoked": True, "revoked_at": now}
