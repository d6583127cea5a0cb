"""A computer's desktop in a browser: the router's resolver for `{slug}.{domain}` (contract §10).

The computer's host serves noVNC's page (from the desktop template's own Debian
package, `novnc.py`) and the RFB WebSocket, which comes from inside the instance: the
desktop template runs websockify on the instance's own loopback
(`corral.vm.DESKTOP_GATEWAY`), bridging each WebSocket to the X server's VNC socket,
so the router forwards to it like any app bound to 127.0.0.1. Nothing listens for
the desktop on an address another instance could reach, and the router lets nobody
through without the computer's stream token.

For every request, in order:

1. the computer of `slug`, if `domain` is one of its domains (404 page otherwise);
2. its stream token: the query parameter `auth`, or the `corral_desktop` cookie a
   browser got earlier; none, unreadable, expired or another computer's is a 401
   page (for a WebSocket: before the upgrade);
3. a token in the query of a GET that is not a WebSocket is traded for a host
   cookie with a redirect to the same URL without it (as previews do);
4. `/` redirects to noVNC's page set to connect by itself to `/stream`;
5. the computer must be running (503 page); `/terminal/{session}` (a WebSocket) goes
   to that terminal session in the guest agent, with the agent's own token added;
   `/stream` (and noVNC's default `/websockify`) to the instance's gateway, without
   the token parameter or cookie; any other path is one of noVNC's files.

Computers are cached by slug for `ENTRY_TTL`; an entry is dropped at once on its
computer's lifecycle events (from any node: the bus brings the others' through the
shared event log) and every entry on a change of preview domains (a notice from any
node), so a computer started, stopped or deleted through another node routes here
as it is now.

A computer that lives on another live node is relayed to that node's router after
step 1, as it came (`remote.py`): its desktop page, stream and terminals then work
through any node.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

import trio

from corral.actors.computers import (
    ComputerActor,
    ComputerRecord,
    Connect,
    computer_urls,
    get_template,
)
from corral.actors.computers import store as computer_store
from corral.actors.instances import record_activity
from corral.net.links import netns_path
from corral.net.preview import Forward, PreviewRequest, Reply, Upstream, page, strip_query_params
from corral.vm import DESKTOP_GATEWAY, InstanceInfo

from . import domains
from .host_access import ActivityMarks, cleared_cookie, token_cookie
from .novnc import NoVncFiles
from .remote import RemoteRouters
from .services import PreviewServices
from .tokens import STREAM_PREFIX, read_stream_token, sign_stream_token, stream_key

log = logging.getLogger("corral.previews.desktops")

COMPUTER_HOST_PATTERN = r"(?P<slug>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\.(?P<domain>[a-z0-9.-]+)"
"""A computer's host name: `{slug}.{domain}` (tried after the sandbox pattern)."""
COOKIE = "corral_desktop"
QUERY_PARAM = "auth"
STREAM_PATHS = frozenset({"/stream", "/websockify"})
"""The RFB WebSocket (`/websockify` is noVNC's own default path)."""
DESKTOP_TEMPLATE = "desktop"
TERMINAL_PATH = re.compile(r"/terminal/(?P<session>\w{1,64})")
NOVNC_PAGE = "/vnc.html?autoconnect=true&reconnect=true&resize=scale&path=stream"
STREAM_TOKEN_SECONDS = 600
"""Contract §10: a stream token opens its computer's desktop for 10 minutes."""
ENTRY_TTL = 2.0
MAX_ENTRIES = 10_000
LIFECYCLE_EVENTS = (
    "computer.started", "computer.running", "computer.stopped", "computer.deleted", "computer.error", "computer.restored",
)


def mint_stream_token(platform: PreviewServices, computer_id: str) -> tuple[str, int]:
    """A token that opens this computer's desktop and terminals, and when it expires (Unix seconds)."""
    expires_at = int(time.time()) + STREAM_TOKEN_SECONDS
    return sign_stream_token(stream_key(platform.jwt_secret), computer_id, expires_at), expires_at


async def desktop_urls(platform: PreviewServices, computer: ComputerRecord) -> dict[str, str]:
    """`desktop_url`, `stream_url`, `terminal_url` on the computer's host, on the preview
    domain its project, workspace or tenant brings (else the service's)."""
    domain = await domains.url_domain(
        platform.db, platform.settings, computer.tenant_id, computer.workspace_id, computer.project_id
    )
    return computer_urls(computer, platform.settings, domain)


@dataclass(frozen=True, slots=True)
class ComputerEntry:
    id: str
    name: str
    status: str
    desktop: bool
    address: str | None
    netns: str
    domains: frozenset[str]
    agent: tuple[int, str] | None = None
    """The guest agent's port and token (terminals are its WebSockets)."""
    home: Upstream | None = None
    """The router of the other node where the computer lives (its requests are relayed there)."""


class DesktopAccess:
    """The router's resolver for computer hosts, with a short cache of computers by slug."""

    def __init__(self, platform: PreviewServices) -> None:
        self.platform = platform
        self.key = stream_key(platform.jwt_secret)
        self.secure = platform.settings.preview_url_scheme == "https"
        self._entries: dict[str, tuple[ComputerEntry | None, float]] = {}
        self._slugs: dict[str, str] = {}  # computer id -> slug, to forget by id
        self._generation = 0
        self.activity = ActivityMarks(platform.nursery, lambda computer_id: record_activity(platform.system.ref(ComputerActor, computer_id)), "computer")
        self.remote = RemoteRouters(platform)
        self.novnc = NoVncFiles(platform.runtime.templates.rootfs(DESKTOP_TEMPLATE) / "usr" / "share" / "novnc")

    def forget(self, computer_id: str) -> None:
        self._generation += 1
        slug = self._slugs.pop(computer_id, None)
        if slug is not None:
            self._entries.pop(slug, None)

    def forget_all(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._slugs.clear()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drop cached computers on their lifecycle events and on preview-domain changes (until cancelled)."""
        self.platform.notices.listen(domains.PREVIEW_DOMAINS_CHANGED, lambda _: self.forget_all())
        await self.platform.bus.follow(
            lambda event: self.forget(event.resource_id), self.forget_all,
            resource_type="computer", types=LIFECYCLE_EVENTS, task_status=task_status,
        )

    async def _entry(self, slug: str) -> ComputerEntry | None:
        now = time.monotonic()
        cached = self._entries.get(slug)
        if cached is not None and now - cached[1] < ENTRY_TTL:
            return cached[0]
        generation = self._generation
        entry = await self._load(slug)
        if generation == self._generation:  # nothing was forgotten meanwhile: the entry is current
            if len(self._entries) > MAX_ENTRIES:
                self.forget_all()
            self._entries[slug] = (entry, now)
            if entry is not None:
                self._slugs[entry.id] = slug
        return entry

    async def _load(self, slug: str) -> ComputerEntry | None:
        db = self.platform.db
        computer = await computer_store.by_slug(db, slug)
        if computer is None:
            return None
        names = await domains.routable_domains(
            db, self.platform.settings, computer.tenant_id, computer.workspace_id, computer.project_id
        )
        address, agent = None, None
        home = await self.remote.home_of(computer.node)
        if computer.status == "running" and home is None:
            try:
                ref = await self.platform.system.get(ComputerActor, computer.id)
                info: InstanceInfo = await ref.ask(Connect())
                address, agent = info.address, (info.agent_port, info.agent_token)
            except Exception as exc:  # stopped meanwhile, or its runtime is gone: a 503 page
                log.debug("no address for computer %s: %s", computer.id, exc)
        template = get_template(computer.template_type)
        return ComputerEntry(
            id=computer.id,
            name=computer.name,
            status=computer.status,
            desktop=bool(template and template.desktop),
            address=address,
            netns=netns_path(f"{self.platform.settings.netns_prefix}{computer.instance_id}"),
            domains=names,
            agent=agent,
            home=home,
        )

    def check_token(self, token: str, computer_id: str) -> tuple[str, float | None]:
        """("ok", expiry) or why not: "invalid", "expired", "other_computer"."""
        claims = read_stream_token(self.key, token)
        if claims is None:
            return "invalid", None
        if claims.expires_at <= time.time():
            return "expired", None
        if claims.resource_id != computer_id:
            return "other_computer", None
        return "ok", float(claims.expires_at)

    async def resolve_computer(self, request: PreviewRequest, match: re.Match[str] | None) -> Forward | Reply:
        assert match is not None
        entry = await self._entry(match["slug"])
        if entry is None or match["domain"] not in entry.domains or not entry.desktop:
            return page(404, "no_computer", "No such desktop", f"No computer's desktop lives at {request.host}.")
        if entry.home is not None and not request.relayed:
            return self.remote.relay(entry.home, request.peer, f"the desktop of {entry.name}")
        token, source = self._presented(request)
        if token is None:
            return page(
                401, "token_required", "This desktop is private",
                f"The desktop of {entry.name} needs a stream token.",
                "Open the <code>desktop_url</code> of <code>GET /api/v1/computers/{id}/vnc-credentials</code>, "
                "or add <code>?auth=</code> with a token from <code>POST /api/v1/computers/{id}/stream-token</code>.",
            )
        verdict, expires = self.check_token(token, entry.id)
        if verdict != "ok":
            return self._refusal(verdict, source, entry.name)

        target = request.target
        cookie_headers: tuple[tuple[str, str], ...] = ()
        if source == "query":
            target, _ = strip_query_params(request.target, frozenset({QUERY_PARAM}), (STREAM_PREFIX,))
            cookie_headers = (("Set-Cookie", token_cookie(COOKIE, token, expires, secure=self.secure)),)
            if request.method in ("GET", "HEAD") and not request.is_upgrade:
                return Reply(302, b"", (("Location", target), ("Cache-Control", "no-store"), ("Referrer-Policy", "no-referrer"), *cookie_headers))
        if target.partition("?")[0] == "/" and not request.is_upgrade:
            return Reply(302, b"", (("Location", NOVNC_PAGE), ("Cache-Control", "no-store")))
        if entry.status != "running" or entry.address is None or entry.agent is None:
            return page(503, "computer_not_running", "The computer is not running",
                        f"Computer {entry.name} is {entry.status}.", "Start it, then reload this page.")
        self.activity.touch(entry.id)
        path = target.partition("?")[0]
        terminal = TERMINAL_PATH.fullmatch(path)
        if terminal is not None:
            return self._terminal(request, entry, terminal["session"])
        if path not in STREAM_PATHS:
            return await self.novnc.reply(path)
        return Forward(
            Upstream(entry.address, DESKTOP_GATEWAY[1], entry.netns, f"the desktop of {entry.name}"),
            target=None if target == request.target else target,
            drop_cookies=frozenset({COOKIE}),
            response_headers=cookie_headers,
        )

    def _terminal(self, request: PreviewRequest, entry: ComputerEntry, session_id: str) -> Forward | Reply:
        """`/terminal/{session}`: the agent's WebSocket of that session, with the agent's token."""
        if not request.is_upgrade:
            return page(400, "websocket_only", "This is a terminal's WebSocket", "Connect to it with a WebSocket client.")
        assert entry.address is not None and entry.agent is not None
        port, agent_token = entry.agent
        return Forward(
            Upstream(entry.address, port, None, f"a terminal of {entry.name}"),
            target=f"/terminals/{session_id}/ws",
            drop_cookies=frozenset({COOKIE}),
            add_headers=(("Authorization", f"Bearer {agent_token}"),),
        )

    def _presented(self, request: PreviewRequest) -> tuple[str | None, str]:
        if "?" in request.target:
            _, found = strip_query_params(request.target, frozenset({QUERY_PARAM}), ("",))
            if found.get(QUERY_PARAM):
                return found[QUERY_PARAM], "query"
        cookie = request.cookie(COOKIE)
        if cookie:
            return cookie, "cookie"
        return None, ""

    def _refusal(self, verdict: str, source: str, name: str) -> Reply:
        clear: tuple[tuple[str, str], ...] = ()
        if source == "cookie":
            clear = (cleared_cookie(COOKIE),)
        title, message = {
            "expired": ("This link has expired", "The stream token has expired."),
            "other_computer": ("This token is for another computer", f"The token does not open the desktop of {name}."),
        }.get(verdict, ("This token is not valid", "The stream token is not valid."))
        return page(401, f"token_{verdict}", title, message, "Get a new one from <code>vnc-credentials</code>.", headers=clear)
