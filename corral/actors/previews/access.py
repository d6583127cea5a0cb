"""Who may see a sandbox's preview, and where it lives: the router's sandbox resolver.

The router (corral/net/preview) calls `PreviewAccess.resolve_sandbox` for every
request to `{port}-{slug}.sandbox.{domain}`. In order:

1. the sandbox of `slug` (404 page when none, or when `domain` is not one of its
   domains: the service's, or a preview domain of its project, workspace or tenant);
2. a token: query `preview_token` or `ms` (contract §6), header `X-Preview-Token`, or
   the `corral_preview` cookie a browser got earlier. None: 401 page. Unreadable,
   expired, revoked: 401 page (and the stale cookie is cleared). A valid token of
   another sandbox: 403 page;
3. a token in the query of a GET or HEAD (not a WebSocket) is traded for a cookie
   scoped to this host (HttpOnly, SameSite=Lax) with a redirect to the same URL
   without the token, so the page's assets and WebSockets load and the token does
   not linger in the address bar or in Referer headers;
4. the port must be exposed (404 page) and the sandbox running (503 page);
5. forward to the instance, without the token header, parameter or cookie, and mark
   the sandbox active (at most once every 10 s per sandbox) for auto-stop.

Everything per request is served from memory: sandbox entries live 5 s and are
dropped at once on the sandbox's lifecycle events (other nodes' too, through the
shared event log), on expose and on preview-domain changes; share tokens are re-read
every second and dropped at once when revoked. Expose, revoke and preview domains
have no event: the node that made the change tells the others with a notice
(`corral.storage.Notices`, topics `SANDBOX_CHANGED`, `SHARE_REVOKED` and
`domains.PREVIEW_DOMAINS_CHANGED`), so every node's router follows within
milliseconds.

A sandbox that lives on another live node is relayed to that node's router after
step 1, as it came, and that router does the rest (`remote.py` says why there).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

import trio

from corral.actors import sandboxes
from corral.actors.sandboxes import Connect, SandboxActor, touch
from corral.net.links import netns_path
from corral.net.preview import Forward, PreviewRequest, Reply, Upstream, page, strip_query_params
from corral.storage import parse_iso
from corral.vm import InstanceInfo

from . import domains, store
from .access_cache import AccessCache
from .host_access import ActivityMarks, cleared_cookie, token_cookie
from .remote import RemoteRouters
from .services import PreviewServices
from .tokens import (
    PREVIEW_PREFIX,
    SHARE_PREFIX,
    PreviewClaims,
    preview_key,
    read_preview_token,
    share_digest,
)

log = logging.getLogger("corral.previews")

COOKIE = "corral_preview"
TOKEN_HEADER = "x-preview-token"
QUERY_PARAMS = frozenset({"preview_token", "ms"})
TOKEN_PREFIXES = (PREVIEW_PREFIX, SHARE_PREFIX)
"""Only values that look like tokens are taken from the query: `?ms=250` is the app's."""
ENTRY_TTL = 5.0
NEGATIVE_TTL = 1.0
SHARE_TTL = 1.0
MAX_ENTRIES = 10_000
SANDBOX_CHANGED = "preview.sandbox"
"""Notice topic: what the router holds of this sandbox (its exposed ports) changed."""
SHARE_REVOKED = "preview.share"
"""Notice topic: this share link was revoked."""
LIFECYCLE_EVENTS = ("sandbox.started", "sandbox.stopped", "sandbox.suspended", "sandbox.destroyed", "sandbox.error", "sandbox.ready")


@dataclass(frozen=True, slots=True)
class SandboxEntry:
    id: str
    name: str
    status: str
    address: str | None
    netns: str | None
    ports: frozenset[int]
    domains: frozenset[str]
    home: Upstream | None = None
    """The router of the other node where the sandbox lives (its requests are relayed there)."""


@dataclass(frozen=True, slots=True)
class ShareEntry:
    share_id: str
    sandbox_id: str
    expires_at: float | None
    revoked: bool
    loaded: float


def access_for(platform: PreviewServices) -> AccessCache:
    """This platform's one `PreviewAccess` (the router and the API share its caches)."""
    if platform.preview_access is None:
        platform.preview_access = PreviewAccess(platform)
    return platform.preview_access


def forget_sandbox(platform: PreviewServices, sandbox_id: str) -> None:
    """The sandbox's routing changed here (a port exposed): every node drops its entry."""
    access_for(platform)  # listening, so that this node drops its own entry too
    platform.notices.tell(SANDBOX_CHANGED, sandbox_id)


def forget_share(platform: PreviewServices, share_id: str) -> None:
    """The share was revoked here: every node reads it again."""
    access_for(platform)
    platform.notices.tell(SHARE_REVOKED, share_id)


def forget_all(platform: PreviewServices) -> None:
    if platform.preview_access is not None:
        platform.preview_access.forget_all()


def instance_netns(platform: PreviewServices, sandbox_id: str) -> str:
    """The namespace driver's network namespace of an instance (for apps bound to loopback)."""
    return netns_path(f"{platform.settings.netns_prefix}{sandbox_id}")


class PreviewAccess:
    def __init__(self, platform: PreviewServices) -> None:
        self.platform = platform
        self.key = preview_key(platform.jwt_secret)
        self.secure = platform.settings.preview_url_scheme == "https"
        self._sandboxes: dict[str, tuple[SandboxEntry | None, float]] = {}  # slug -> (entry, loaded at)
        self._generation = 0
        self._slugs: dict[str, str] = {}  # sandbox id -> slug, to forget by id
        self._shares: dict[str, ShareEntry | None] = {}
        self._share_generation = 0
        self.activity = ActivityMarks(platform.nursery, lambda sandbox_id: touch(platform, sandbox_id), "sandbox")
        self._claims: dict[str, PreviewClaims] = {}
        self.remote = RemoteRouters(platform)
        notices = platform.notices
        notices.listen(SANDBOX_CHANGED, self._sandbox_changed)
        notices.listen(SHARE_REVOKED, self._share_revoked)
        notices.listen(domains.PREVIEW_DOMAINS_CHANGED, lambda _: self.forget_all())

    def _sandbox_changed(self, sandbox_id: str | None) -> None:
        if sandbox_id is None:  # notices may have been missed: everything is read again
            self.forget_all()
        else:
            self.forget_sandbox(sandbox_id)

    def _share_revoked(self, share_id: str | None) -> None:
        if share_id is None:
            self._shares.clear()
        else:
            self.forget_share(share_id)

    # -- cache ------------------------------------------------------------------------

    def forget_sandbox(self, sandbox_id: str) -> None:
        self._generation += 1
        slug = self._slugs.pop(sandbox_id, None)
        if slug is not None:
            self._sandboxes.pop(slug, None)

    def forget_share(self, share_id: str) -> None:
        self._share_generation += 1  # a read in flight may predate the revocation
        for digest, entry in list(self._shares.items()):
            if entry is not None and entry.share_id == share_id:
                del self._shares[digest]

    def forget_all(self) -> None:
        self._generation += 1
        self._sandboxes.clear()
        self._slugs.clear()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drop cached sandboxes on their lifecycle events (until cancelled)."""
        await self.platform.bus.follow(
            lambda event: self.forget_sandbox(event.resource_id), self.forget_all,
            resource_type="sandbox", types=LIFECYCLE_EVENTS, task_status=task_status,
        )

    async def _entry(self, slug: str) -> SandboxEntry | None:
        now = time.monotonic()
        cached = self._sandboxes.get(slug)
        if cached is not None and now - cached[1] < (ENTRY_TTL if cached[0] is not None else NEGATIVE_TTL):
            return cached[0]
        generation = self._generation
        loaded = await self._load(slug)
        if generation == self._generation:  # nothing was forgotten meanwhile: the entry is current
            if len(self._sandboxes) > MAX_ENTRIES:
                self.forget_all()
            self._sandboxes[slug] = (loaded, now)
            if loaded is not None:
                self._slugs[loaded.id] = slug
        return loaded

    async def _load(self, slug: str) -> SandboxEntry | None:
        db = self.platform.db
        sandbox = await sandboxes.store.by_slug(db, slug)
        if sandbox is None:
            return None
        ports = await store.exposed_ports(db, sandbox.id)
        names = await domains.routable_domains(db, self.platform.settings, sandbox.tenant_id, sandbox.workspace_id, sandbox.project_id)
        address = None
        home = await self.remote.home_of(sandbox.node)
        if sandbox.status == "running" and home is None:
            try:
                ref = await self.platform.system.get(SandboxActor, sandbox.id)
                info: InstanceInfo = await ref.ask(Connect())
                address = info.address
            except Exception as exc:  # not running after all, or its runtime is gone: a 503 page
                log.debug("no address for sandbox %s: %s", sandbox.id, exc)
        return SandboxEntry(
            id=sandbox.id,
            name=sandbox.name,
            status=sandbox.status,
            address=address,
            netns=instance_netns(self.platform, sandbox.id),
            ports=ports,
            domains=names,
            home=home,
        )

    # -- tokens -----------------------------------------------------------------------

    async def _share(self, token: str) -> ShareEntry | None:
        digest = share_digest(token)
        now = time.monotonic()
        entry = self._shares.get(digest)
        if entry is not None and now - entry.loaded < SHARE_TTL:
            return entry
        generation = self._share_generation
        share = await store.share_by_digest(self.platform.db, digest)
        if share is None:
            return None
        entry = ShareEntry(
            share_id=share.id,
            sandbox_id=share.sandbox_id,
            expires_at=parse_iso(share.expires_at).timestamp() if share.expires_at else None,
            revoked=share.revoked_at is not None,
            loaded=now,
        )
        if len(self._shares) > MAX_ENTRIES:
            self._shares.clear()
        if generation == self._share_generation:
            self._shares[digest] = entry
        return entry

    async def check_token(self, token: str, sandbox_id: str) -> tuple[str, float | None]:
        """("ok", expiry) or (why not, None): "invalid", "expired", "revoked", "other_sandbox"."""
        if token.startswith(PREVIEW_PREFIX):
            claims = self._claims.get(token)
            if claims is None:
                claims = read_preview_token(self.key, token)
                if claims is None:
                    return "invalid", None
                if len(self._claims) > MAX_ENTRIES:
                    self._claims.clear()
                self._claims[token] = claims  # a signature checked once per token, not per request
            if claims.expires_at <= time.time():
                return "expired", None
            if claims.resource_id != sandbox_id:
                return "other_sandbox", None
            return "ok", float(claims.expires_at)
        if token.startswith(SHARE_PREFIX) and len(token) < 200:
            share = await self._share(token)
            if share is None:
                return "invalid", None
            if share.revoked:
                return "revoked", None
            if share.expires_at is not None and share.expires_at <= time.time():
                return "expired", None
            if share.sandbox_id != sandbox_id:
                return "other_sandbox", None
            return "ok", share.expires_at
        return "invalid", None

    # -- the resolver -----------------------------------------------------------------

    async def resolve_sandbox(self, request: PreviewRequest, match: re.Match[str] | None) -> Forward | Reply:
        assert match is not None
        port, slug, domain = int(match["port"]), match["slug"], match["domain"]
        entry = await self._entry(slug)
        if entry is None or domain not in entry.domains:
            return page(404, "no_sandbox", "No such sandbox", f"No sandbox lives at {request.host}.",
                        "It may have been deleted. Ask whoever shared this link for a new one.")
        if entry.home is not None and not request.relayed:
            return self.remote.relay(entry.home, request.peer, f"sandbox {entry.name}")
        label = f"port {port} of sandbox {entry.name}"

        token, source = self._presented(request)
        if token is None:
            return page(
                401, "token_required", "This preview is private",
                f"Port {port} of sandbox {entry.name} needs a preview token or a share link.",
                "Open the share link you were given, or mint a token with "
                "<code>POST /api/v1/sandboxes/{id}/preview-token</code> and pass it as the "
                "<code>X-Preview-Token</code> header or the <code>preview_token</code> query parameter.",
                headers=(("WWW-Authenticate", 'Preview-Token realm="corral preview"'),),
            )
        verdict, expires = await self.check_token(token, entry.id)
        if verdict != "ok":
            return self._refusal(verdict, source, entry.name)

        target = request.target
        cookie_headers: tuple[tuple[str, str], ...] = ()
        if source == "query":
            target, _ = strip_query_params(request.target, QUERY_PARAMS, TOKEN_PREFIXES)
            cookie_headers = (("Set-Cookie", token_cookie(COOKIE, token, expires, secure=self.secure)),)
            if request.method in ("GET", "HEAD") and not request.is_upgrade:
                return Reply(302, b"", (("Location", target), ("Cache-Control", "no-store"), ("Referrer-Policy", "no-referrer"), *cookie_headers))
        if port not in entry.ports:
            return page(404, "port_not_exposed", "This port is not exposed",
                        f"Port {port} of sandbox {entry.name} has not been exposed.",
                        f"Expose it first: <code>POST /api/v1/sandboxes/{{id}}/expose {{&quot;port&quot;: {port}}}</code>.")
        if entry.status != "running":
            return page(503, "sandbox_not_running", "The sandbox is not running",
                        f"Sandbox {entry.name} is {entry.status}.", "Start it again, then reload this page.")
        if entry.address is None:
            return page(503, "sandbox_unreachable", "The sandbox cannot be reached right now",
                        f"Sandbox {entry.name} is running but its instance has no address.", "Reload this page in a moment.")
        self.activity.touch(entry.id)
        return Forward(
            Upstream(entry.address, port, entry.netns, label),
            target=None if target == request.target else target,
            drop_headers=frozenset({TOKEN_HEADER}),
            drop_cookies=frozenset({COOKIE}),
            response_headers=cookie_headers,
        )

    def _presented(self, request: PreviewRequest) -> tuple[str | None, str]:
        if "?" in request.target:
            _, found = strip_query_params(request.target, QUERY_PARAMS, TOKEN_PREFIXES)
            token = found.get("preview_token") or found.get("ms")
            if token:
                return token, "query"
        header = request.header(TOKEN_HEADER)
        if header:
            return header.strip(), "header"
        cookie = request.cookie(COOKIE)
        if cookie:
            return cookie, "cookie"
        return None, ""

    def _refusal(self, verdict: str, source: str, name: str) -> Reply:
        clear: tuple[tuple[str, str], ...] = ()
        if source == "cookie":
            clear = (cleared_cookie(COOKIE),)
        if verdict == "other_sandbox":
            return page(403, "wrong_sandbox", "This token is for another sandbox",
                        f"The token you presented does not open sandbox {name}.",
                        "Use the share link or preview token made for this sandbox.", headers=clear)
        title, message = {
            "expired": ("This link has expired", "The preview token or share link has expired."),
            "revoked": ("This link was revoked", "The owner of this sandbox revoked the share link."),
        }.get(verdict, ("This token is not valid", "The preview token or share link is not valid."))
        return page(401, f"token_{verdict}", title, message, "Ask the sandbox's owner for a new link.",
                    headers=(("WWW-Authenticate", 'Preview-Token realm="corral preview"'), *clear))
