"""OAuth connect (contract §11): providers, PKCE flows, and the `oauth_connect` secret.

Providers come from the operator (`CORRAL_OAUTH_PROVIDERS`, a JSON file: a list of
`{provider, name, client_id, client_secret, authorize_url, token_url, scopes,
allowed_hosts}`), merged with tenant overrides an owner or admin registers (same
fields; a tenant's `provider` key wins over the operator's). Client secrets are never
shown; a tenant's is sealed with the SecretBox.

`start` records a pending flow keyed by a random `state` and answers the provider's
authorize URL (`response_type=code`, `client_id`, `redirect_uri`, `state`, `scope`,
`code_challenge` with `code_challenge_method=S256`). The public callback exchanges
the code at `token_url` (with the PKCE verifier) and stores the access token as an
`oauth_connect` vault secret whose `allowed_hosts` are the provider's, bound
scope-wide under `expose_as_env` when asked; the refresh token is kept sealed on the
flow. A flow is `pending`, then `complete` (with `secret_id`) or `failed` (with
`error`). `refresh_expiring` (called by the proxy before it loads a resource's bound
secrets) trades the refresh token for a new access token when the secret's expiry is
near; a refresh that fails leaves the secret expired (it is then not substituted).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import secrets as random
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

import httpx
import trio

from corral.actors.webhooks.destinations import (
    DestinationRefused,
    InvalidUrl,
    check_destination,
    check_url_host,
    parse_url,
)
from corral.config import SettingsError
from corral.errors import ApiError, conflict, forbidden, not_found, validation_error
from corral.ids import new_uuid
from corral.models import Rule, model
from corral.storage import associated_data, iso_in, parse_iso, to_iso, utc_now, utc_now_iso

from . import oauth_store
from .oauth_store import FLOWS, PROVIDERS, FlowRecord, ProviderRecord
from .services import EgressServices
from .spec import EnvName, Hosts, NewSecret, SecretChange
from .store import SECRETS
from .vault import Caller, create_secret, require_role, update_secret

FLOW_TTL = timedelta(minutes=10)
FLOW_RETENTION = timedelta(days=1)
"""Flows that did not complete are deleted this long after they started."""
"""A flow's callback must arrive within this long of its start."""
TOKEN_TIMEOUT = 15.0
MAX_TOKEN_ANSWER = 64 * 1024
"""A token endpoint's answer is a small JSON object (tokens, expiry, scopes)."""
REFRESH_MARGIN = 60.0
"""An access token this close to its expiry (seconds) is refreshed before it is used."""

log = logging.getLogger(__name__)
_refreshing = trio.Lock()
REFRESH_RETRY_SECONDS = 60.0
"""After a refused refresh, the flow is not tried again for this long (per process)."""
_failed_at: dict[str, float] = {}
PROVIDER_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
START_SCOPES = ("tenant", "user")
"""The scopes of a secret an OAuth flow makes."""


PROVIDER_KEY_RULE = Rule(max_length=64, pattern=PROVIDER_KEY.pattern, description="lowercase provider key")


def _url_problem(value: str) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(value) > 2048:
        return "must be an http or https URL"
    return None


Url = Annotated[str, Rule(check=_url_problem, max_length=2048, format="uri", schema={"pattern": "^[hH][tT][tT][pP][sS]?://[^/?#]"})]


@model
class NewProvider:
    """A tenant's own OAuth client for a provider (overrides the operator's)."""

    provider: Annotated[str, PROVIDER_KEY_RULE]
    name: Annotated[str, Rule(max_length=200)]
    client_id: Annotated[str, Rule(max_length=1024)]
    client_secret: Annotated[str, Rule(max_length=4096, strip=False)]
    authorize_url: Url
    token_url: Url
    scopes: Annotated[list[str], Rule(max_length=100)] | None = None
    allowed_hosts: Hosts | None = None


@model(
    schema={
        "if": {"required": ["scope"], "properties": {"scope": {"const": "tenant"}}},
        "then": {"properties": {"owner_user_id": {"type": "null"}}},
    }
)
class OAuthStart:
    """Begin connecting: the provider, and the secret's env name, scope and owner."""

    provider: Annotated[str, Rule(max_length=64)]
    expose_as_env: EnvName | None = None
    scope: Annotated[
        str | None,
        Rule(
            choices=START_SCOPES,
            error=lambda _: ApiError(400, "INVALID_PARAM", "invalid scope", details={"scope": "must be tenant or user"}),
            description="tenant or user (default user)",
        ),
    ] = None
    owner_user_id: str | None = None


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    provider: str
    name: str
    client_id: str
    client_secret: str = field(repr=False)
    authorize_url: str
    token_url: str
    scopes: list[str] = field(hash=False)
    allowed_hosts: list[str] = field(hash=False)
    source: str


def _provider_aad(tenant_id: str, provider_id: str) -> bytes:
    return associated_data(tenant_id, provider_id, "egress-oauth-client-secret")


def _refresh_aad(tenant_id: str, flow_id: str) -> bytes:
    return associated_data(tenant_id, flow_id, "egress-oauth-refresh-token")


def provider_public(provider: Provider) -> dict[str, Any]:
    return {
        "id": provider.id,
        "provider": provider.provider,
        "name": provider.name,
        "client_id": provider.client_id,
        "authorize_url": provider.authorize_url,
        "token_url": provider.token_url,
        "scopes": provider.scopes,
        "allowed_hosts": provider.allowed_hosts,
        "source": provider.source,
    }


def flow_public(flow: FlowRecord) -> dict[str, Any]:
    # `exchanging` (the callback is at the token endpoint) is still pending to the caller.
    status = "pending" if flow.status == "exchanging" else flow.status
    return {"state": flow.state, "status": status, "secret_id": flow.secret_id, "error": flow.error}


# -- providers ----------------------------------------------------------------------


class ProvidersFileError(SettingsError):
    """`CORRAL_OAUTH_PROVIDERS` cannot be read or is not a list of providers."""


def operator_providers(path: str | None) -> list[Provider]:
    """The operator's providers from the JSON file (none when unset). The node checks the
    file at start (`check_operator_providers`); if it breaks later, OAuth answers 503."""
    if not path:
        return []
    try:
        entries = json.loads(Path(path).read_text())
        if not isinstance(entries, list):
            raise ValueError("the file must hold a JSON list of providers")
        return [_operator_provider(entry) for entry in entries]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ProvidersFileError(f"CORRAL_OAUTH_PROVIDERS ({path}): {problem}") from exc


def check_operator_providers(path: str | None) -> None:
    """Refuse to start with a providers file that cannot be used (the error says why)."""
    operator_providers(path)


def _operator_provider(entry: dict[str, Any]) -> Provider:
    for name in ("provider", "client_id", "authorize_url", "token_url"):
        if not entry.get(name):
            raise KeyError(name)
    return Provider(
        id=str(entry["provider"]),
        provider=str(entry["provider"]),
        name=str(entry.get("name") or entry["provider"]),
        client_id=str(entry["client_id"]),
        client_secret=str(entry.get("client_secret") or ""),
        authorize_url=str(entry["authorize_url"]),
        token_url=str(entry["token_url"]),
        scopes=[str(scope) for scope in entry.get("scopes") or []],
        allowed_hosts=[str(host) for host in entry.get("allowed_hosts") or []],
        source="platform",
    )


def _tenant_provider(services: EgressServices, record: ProviderRecord) -> Provider:
    return Provider(
        id=record.id,
        provider=record.provider,
        name=record.name,
        client_id=record.client_id,
        client_secret=services.secrets.decrypt_text(
            record.client_secret, _provider_aad(record.tenant_id, record.id)
        ),
        authorize_url=record.authorize_url,
        token_url=record.token_url,
        scopes=record.scopes,
        allowed_hosts=record.allowed_hosts,
        source="tenant",
    )


async def providers_of(
    services: EgressServices, tenant_id: str, operator_file: str | None
) -> list[Provider]:
    """The operator's providers with the tenant's overrides in their place."""
    try:
        operator = operator_providers(operator_file)
    except ProvidersFileError as exc:
        log.error("%s", exc)
        raise ApiError(
            503,
            "SERVICE_UNAVAILABLE",
            "the platform's OAuth provider configuration cannot be read; tell the operator",
        ) from exc
    merged = {provider.provider: provider for provider in operator}
    for record in await PROVIDERS.where(
        services.db, [("tenant_id", tenant_id)], order_by="provider"
    ):
        merged[record.provider] = _tenant_provider(services, record)
    return sorted(merged.values(), key=lambda provider: provider.provider)


def _require_admin(caller: Caller) -> None:
    if not caller.is_admin:
        raise forbidden("OAuth provider registration needs a tenant owner or admin")


def _check_destination(url: str, allow_private: bool) -> None:
    """A tenant's token_url is https and not a private address (unless the node allows those)."""
    if allow_private:
        return
    try:
        check_url_host(parse_url(url), allow_private=False)
    except (InvalidUrl, DestinationRefused) as exc:
        raise validation_error({"token_url": str(exc)}, "token_url destination refused") from None


async def register_provider(
    services: EgressServices, caller: Caller, fields: NewProvider, *, allow_private: bool
) -> Provider:
    _require_admin(caller)
    _check_destination(fields.token_url, allow_private)
    provider_id = new_uuid()
    record = ProviderRecord(
        id=provider_id,
        tenant_id=caller.tenant_id,
        provider=fields.provider,
        name=fields.name,
        client_id=fields.client_id,
        client_secret=services.secrets.encrypt_text(
            fields.client_secret, _provider_aad(caller.tenant_id, provider_id)
        ),
        authorize_url=fields.authorize_url,
        token_url=fields.token_url,
        scopes=list(fields.scopes or []),
        allowed_hosts=list(dict.fromkeys(fields.allowed_hosts or [])),
        created_at=utc_now_iso(),
    )

    if not await oauth_store.add_provider(services.db, record):
        raise conflict("PROVIDER_EXISTS", "this tenant already registered this provider")
    return _tenant_provider(services, record)


async def delete_provider(services: EgressServices, caller: Caller, provider_id: str) -> None:
    found = await PROVIDERS.where(
        services.db, [("id", provider_id), ("tenant_id", caller.tenant_id)]
    )
    if not found:
        raise not_found("provider not found")
    _require_admin(caller)
    await services.db.transaction(lambda tx: PROVIDERS.delete(tx, provider_id))


# -- flows --------------------------------------------------------------------------


def _challenge(verifier: str) -> str:
    return (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )


async def start(
    services: EgressServices,
    caller: Caller,
    fields: OAuthStart,
    *,
    operator_file: str | None,
    api_base: str,
) -> tuple[str, str]:
    """A pending flow; `(authorize_url, state)`."""
    providers = {
        p.provider: p for p in await providers_of(services, caller.tenant_id, operator_file)
    }
    provider = providers.get(fields.provider)
    if provider is None:
        raise not_found("OAuth provider not found")
    scope = fields.scope or "user"
    if scope not in START_SCOPES:
        raise ApiError(
            400, "INVALID_PARAM", "invalid scope", details={"scope": "must be tenant or user"}
        )
    owner = None
    if scope == "user":
        owner = fields.owner_user_id or caller.user_id
        if not owner:
            raise validation_error(
                {"owner_user_id": "is required for scope user"}, "scope and identity mismatch"
            )
    elif fields.owner_user_id:
        raise validation_error(
            {"owner_user_id": "must not be set for scope tenant"}, "scope and identity mismatch"
        )
    require_role(caller, scope, owner)
    await oauth_store.prune_flows(services.db, caller.tenant_id, to_iso(utc_now() - FLOW_RETENTION))
    state = random.token_urlsafe(32)
    verifier = random.token_urlsafe(48)
    redirect_uri = api_base.rstrip("/") + "/api/v1/egress/oauth/callback"
    now = utc_now_iso()
    flow = FlowRecord(
        id=new_uuid(),
        tenant_id=caller.tenant_id,
        state=state,
        provider=provider.provider,
        user_id=caller.user_id,
        is_admin=int(caller.is_admin),
        scope=scope,
        owner_user_id=owner,
        expose_as_env=fields.expose_as_env,
        redirect_uri=redirect_uri,
        code_verifier=verifier,
        status="pending",
        secret_id=None,
        error=None,
        refresh_token=None,
        created_at=now,
        updated_at=now,
    )
    await services.db.transaction(lambda tx: FLOWS.insert(tx, flow))
    query = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "scope": " ".join(provider.scopes),
        "code_challenge": _challenge(verifier),
        "code_challenge_method": "S256",
    }
    separator = "&" if urlsplit(provider.authorize_url).query else "?"
    return provider.authorize_url + separator + urlencode(query), state


async def flow_status(services: EgressServices, tenant_id: str, state: str) -> FlowRecord:
    found = await FLOWS.where(services.db, [("state", state), ("tenant_id", tenant_id)])
    if not found:
        raise not_found("OAuth flow not found")
    return found[0]


class CallbackError(Exception):
    """Why a callback did not complete a flow, with the HTTP status of its page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _fail(services: EgressServices, flow: FlowRecord, error: str) -> None:
    await FLOWS.update(
        services.db, flow.id, {"status": "failed", "error": error, "updated_at": utc_now_iso()}
    )


async def _claim(services: EgressServices, state: str) -> FlowRecord:
    """The pending flow of `state`, marked as being handled so a second callback fails."""
    found = await FLOWS.where(services.db, [("state", state)])
    if not found:
        raise CallbackError(404, "This sign-in link is unknown.")
    flow = found[0]
    if not await oauth_store.mark_exchanging(services.db, flow.id):
        raise CallbackError(409, "This sign-in was already used.")
    if parse_iso(flow.created_at) + FLOW_TTL < utc_now():
        await _fail(services, flow, "the flow expired before the provider answered")
        raise CallbackError(400, "This sign-in expired; start again.")
    return flow


async def _exchange(provider: Provider, flow: FlowRecord, code: str) -> dict[str, Any]:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": flow.redirect_uri,
        "code_verifier": flow.code_verifier,
    }
    return await _token_request(provider, form)


async def callback(
    services: EgressServices,
    *,
    state: str | None,
    code: str | None,
    error: str | None,
    operator_file: str | None,
    allow_private: bool,
) -> FlowRecord:
    """Complete the flow of `state` (CallbackError says why not; the flow is failed when known)."""
    if not state:
        raise CallbackError(400, "The provider sent no state.")
    flow = await _claim(services, state)
    try:
        if error:
            raise CallbackError(400, f"provider answered error: {error[:200]}")
        if not code:
            raise CallbackError(400, "provider sent no code")
        providers = {
            p.provider: p for p in await providers_of(services, flow.tenant_id, operator_file)
        }
        provider = providers.get(flow.provider)
        if provider is None:
            raise CallbackError(400, "the provider is no longer configured")
        if provider.source == "tenant" and not allow_private:
            # Resolved now: a tenant's name may point at a private address since it was registered.
            try:
                await check_destination(parse_url(provider.token_url), allow_private=False)
            except (InvalidUrl, DestinationRefused) as exc:
                raise CallbackError(502, f"token_url refused: {exc}") from None
        tokens = await _exchange(provider, flow, code)
        expires_at = None
        if isinstance(tokens.get("expires_in"), int | float):
            expires_at = iso_in(float(tokens["expires_in"]))
        fields = NewSecret(
            name=f"oauth-{provider.provider}-{flow.id[:8]}",
            value=tokens["access_token"],
            type="oauth_connect",
            scope=flow.scope,
            expose_as_env=flow.expose_as_env,
            owner_user_id=flow.owner_user_id,
            allowed_hosts=list(provider.allowed_hosts),
            expires_at=expires_at,
        )
        caller = Caller(flow.tenant_id, bool(flow.is_admin), flow.user_id)
        try:
            secret, _ = await create_secret(services, caller, fields)
        except ApiError as exc:
            raise CallbackError(
                exc.status, f"the secret could not be stored: {exc.message}"
            ) from None
    except CallbackError as exc:
        await _fail(services, flow, exc.message)
        raise
    refresh = tokens.get("refresh_token")
    values: dict[str, Any] = {
        "status": "complete",
        "secret_id": secret.id,
        "updated_at": utc_now_iso(),
    }
    if isinstance(refresh, str) and refresh:
        values["refresh_token"] = services.secrets.encrypt_text(
            refresh, _refresh_aad(flow.tenant_id, flow.id)
        )
    await FLOWS.update(services.db, flow.id, values)
    return FLOWS.replaced(flow, values)


# -- refresh ------------------------------------------------------------------------


async def _token_request(provider: Provider, form: dict[str, str]) -> dict[str, Any]:
    """POST `form` (with the client's credentials) to the token endpoint; its JSON tokens."""
    form = {**form, "client_id": provider.client_id}
    if provider.client_secret:
        form["client_secret"] = provider.client_secret
    try:
        async with (
            httpx.AsyncClient(timeout=TOKEN_TIMEOUT, follow_redirects=False) as client,
            client.stream("POST", provider.token_url, data=form, headers={"Accept": "application/json"}) as response,
        ):
            # A tenant's token endpoint is the tenant's server: what it sends is read up
            # to what a token answer can be, never whole.
            raw = b""
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_TOKEN_ANSWER:
                    raise CallbackError(502, f"token endpoint answered more than {MAX_TOKEN_ANSWER} bytes")
    except httpx.HTTPError as exc:
        raise CallbackError(502, f"token endpoint unreachable: {type(exc).__name__}") from None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise CallbackError(
            502, f"token endpoint answered {response.status_code} without a JSON object"
        )
    if response.status_code != 200 or "error" in body:
        error = str(body.get("error") or response.status_code)
        raise CallbackError(502, f"token endpoint refused: {error[:200]}")
    if not isinstance(body.get("access_token"), str) or not body["access_token"]:
        raise CallbackError(502, "token endpoint answered without an access_token")
    return body


async def refresh_expiring(services: EgressServices, tenant_id: str) -> int:
    """Refresh the tenant's `oauth_connect` secrets that expire within `REFRESH_MARGIN`;
    how many were refreshed. Failures are logged (without tokens) and leave the secret."""
    due = await oauth_store.refreshable_flows(services.db, tenant_id, iso_in(REFRESH_MARGIN))
    refreshed = 0
    for flow in due:
        if trio.current_time() - _failed_at.get(flow.id, float("-inf")) < REFRESH_RETRY_SECONDS:
            continue
        async with _refreshing:
            try:
                refreshed += await _refresh(services, flow.id)
            except CallbackError as exc:
                _failed_at[flow.id] = trio.current_time()
                log.warning("OAuth refresh of secret %s failed: %s", flow.secret_id, exc.message)
            else:
                _failed_at.pop(flow.id, None)
    return refreshed


async def _refresh(services: EgressServices, flow_id: str) -> int:
    flow = await FLOWS.load(services.db, flow_id)
    if flow is None or flow.secret_id is None or flow.refresh_token is None:
        return 0
    secret = await SECRETS.load(services.db, flow.secret_id)
    if (
        secret is None
        or secret.expires_at is None
        or parse_iso(secret.expires_at) > parse_iso(iso_in(REFRESH_MARGIN))
    ):
        return 0  # gone, or refreshed meanwhile
    providers = {
        p.provider: p
        for p in await providers_of(services, flow.tenant_id, services.settings.oauth_providers)
    }
    provider = providers.get(flow.provider)
    if provider is None:
        raise CallbackError(400, "the provider is no longer configured")
    if provider.source == "tenant" and not services.settings.allow_private_destinations:
        try:
            await check_destination(parse_url(provider.token_url), allow_private=False)
        except (InvalidUrl, DestinationRefused) as exc:
            raise CallbackError(502, f"token_url refused: {exc}") from None
    refresh_token = services.secrets.decrypt_text(
        flow.refresh_token, _refresh_aad(flow.tenant_id, flow.id)
    )
    tokens = await _token_request(
        provider, {"grant_type": "refresh_token", "refresh_token": refresh_token}
    )
    expires_in = tokens.get("expires_in")
    expires_at = iso_in(float(expires_in)) if isinstance(expires_in, int | float) else None
    change = SecretChange(value=tokens["access_token"], expires_at=expires_at)
    await update_secret(services, Caller(flow.tenant_id, True), secret, change)
    rotated = tokens.get("refresh_token")
    if isinstance(rotated, str) and rotated:
        sealed = services.secrets.encrypt_text(rotated, _refresh_aad(flow.tenant_id, flow.id))
        await FLOWS.update(
            services.db, flow.id, {"refresh_token": sealed, "updated_at": utc_now_iso()}
        )
    return 1
