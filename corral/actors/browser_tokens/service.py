"""Browser tokens (contract §16): a short-lived bearer credential for one sandbox.

A platform embeds a sandbox in a web page without handing its API key to the
browser: its server mints `POST /browser-tokens {sandbox_id, expires_in}` and gives
the page the `mbt_` token. The token carries the minting credential's sandbox scopes
(`sandboxes:read`, `sandboxes:write`) and nothing else; the HTTP pipeline lets it
reach only that sandbox's routes (`BrowserGrant.admits`). A token stops working when
it expires, when its sandbox is destroyed (the routes answer 404), or when the key
that minted it is revoked (checked on every use).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

from corral.actors.sandboxes import SandboxRecord
from corral.actors.tenancy import api_keys
from corral.errors import ApiError, invalid_id, unauthorized
from corral.ids import new_uuid, random_token
from corral.models import Rule, model
from corral.storage import Database, iso_in, utc_now_iso

from . import store

PREFIX = "mbt_"
DEFAULT_TTL = 3600
MAX_TTL = 86400
SANDBOX_SCOPES = ("sandboxes:read", "sandboxes:write")
MAX_TOKEN_LENGTH = 128


@model
class NewBrowserToken:
    """A token for `sandbox_id`, valid `expires_in` seconds (1-86400, default 3600)."""

    sandbox_id: Annotated[str, Rule(max_length=64, format="uuid", error=lambda _: invalid_id("sandbox id"), message="must be a sandbox id")]
    expires_in: Annotated[
        int | None,
        Rule(minimum=1, maximum=MAX_TTL, message=f"must be an integer number of seconds from 1 to {MAX_TTL}",
             schema={"default": DEFAULT_TTL}),
    ] = None


@dataclass(frozen=True)
class BrowserGrant:
    """What an authenticated browser token may do: one sandbox, some sandbox scopes."""

    token_id: str
    tenant_id: str
    sandbox_id: str
    user_id: str | None
    api_key_id: str | None
    workspace_id: str | None
    scopes: frozenset[str]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_scopes(minting_scopes: frozenset[str] | None) -> list[str]:
    """The sandbox scopes of the minting credential (all of them for a session)."""
    if minting_scopes is None:
        return list(SANDBOX_SCOPES)
    return [scope for scope in SANDBOX_SCOPES if scope in minting_scopes]


async def mint(
    db: Database,
    sandbox: SandboxRecord,
    *,
    user_id: str | None,
    api_key_id: str | None,
    workspace_id: str | None,
    scopes: frozenset[str] | None,
    expires_in: int | None,
) -> dict[str, Any]:
    """A new token for `sandbox` (the caller's, checked by the route); shown once."""
    token = PREFIX + random_token(32)
    record = store.BrowserTokenRecord(
        id=new_uuid(),
        tenant_id=sandbox.tenant_id,
        sandbox_id=sandbox.id,
        token_digest=digest(token),
        user_id=user_id,
        api_key_id=api_key_id,
        workspace_id=workspace_id,
        scopes=token_scopes(scopes),
        expires_at=iso_in(expires_in or DEFAULT_TTL),
        created_at=utc_now_iso(),
    )
    now = utc_now_iso()

    def work(tx: Any) -> None:
        store.prune_expired(tx, now)
        store.insert(tx, record)

    await db.transaction(work)
    return {"token": token, "expires_at": record.expires_at, "sandbox_id": sandbox.id}


async def authenticate(db: Database, token: str) -> BrowserGrant:
    """The grant of a live token, else 401: unknown, expired, or its minting key revoked."""
    record = await store.by_digest(db, digest(token)) if len(token) <= MAX_TOKEN_LENGTH else None
    if record is None or record.expires_at <= utc_now_iso():
        raise unauthorized("invalid or expired browser token")
    if record.api_key_id is not None:
        key = await api_keys.find_with_member_by_id(db, record.api_key_id)
        if key is None or key.status != "active" or (key.user_id is not None and key.member_role is None):
            raise unauthorized("the key that minted this browser token was revoked")
    return BrowserGrant(
        token_id=record.id,
        tenant_id=record.tenant_id,
        sandbox_id=record.sandbox_id,
        user_id=record.user_id,
        api_key_id=record.api_key_id,
        workspace_id=record.workspace_id,
        scopes=frozenset(record.scopes),
    )


def outside_sandbox() -> ApiError:
    return ApiError(403, "FORBIDDEN", "a browser token reaches only its own sandbox's routes")


def other_sandbox() -> ApiError:
    return ApiError(404, "NOT_FOUND", "sandbox not found")


SANDBOX_ROOT = "/sandboxes/{id}"
EXCLUDED = {("POST", "/sandboxes/{id}/fork"), ("DELETE", "/sandboxes/{id}")}
"""Routes below the sandbox a browser token may not call: a fork makes a sandbox the
token cannot reach, and destroying the sandbox is its owner's to do."""


TICKET_PURPOSE = "sandbox:{id}"
"""The purpose of an SSE ticket a browser token mints: the sandbox's stream routes take
it (`Route.ticket_purpose`), no other route does."""
OUTSIDE_ALLOWED = {("POST", "/auth/sse-ticket")}
"""Routes outside the sandbox a browser token may call: minting a ticket for a browser
EventSource (the ticket opens only its sandbox's streams)."""


def ticket_purpose(sandbox_id: str) -> str:
    return TICKET_PURPOSE.format(id=sandbox_id)


def check_route(sandbox_id: str, method: str, path: str, params: dict[str, Any]) -> None:
    """403 for a route outside `/sandboxes/{id}` (and the excluded ones), 404 for another sandbox."""
    if (method, path) in OUTSIDE_ALLOWED:
        return
    within = path == SANDBOX_ROOT or path.startswith(SANDBOX_ROOT + "/")
    if not within or (method, path) in EXCLUDED:
        raise outside_sandbox()
    if str(params.get("id", "")).lower() != sandbox_id:
        raise other_sandbox()
