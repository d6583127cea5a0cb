"""Which host names the TLS edge may get a certificate for (`GET /tls/ask`, contract §12).

Caddy asks before every certificate (also before loading one from its storage), so
the answer comes from memory and fails closed. A name is allowed when it is
- a verified or active custom domain (the node's `DomainMap`);
- a sandbox preview host `{port}-{slug}.sandbox.{domain}` or a computer host
  `{slug}.{domain}` of a live sandbox or computer, where `domain` is the service's
  own or a preview domain (pending or configured) of that resource's tenant,
  workspace or project;
- a host the deployments part says is live (`live_deployment_host` of its sites).

The index is loaded at start and follows the bus (`computer.created/deleted`,
`sandbox.created/destroyed`, and `custom_domain.*`, on which the node's `DomainMap`
re-reads that domain); the bus brings the events of every node sharing the store,
so a change made through any node shows here within milliseconds. Preview domains
are re-read when a notice says they changed (`PREVIEW_DOMAINS_CHANGED`, from any
node), and every few seconds; everything is reloaded every minute (and after the
notices' connection was lost), in case something was missed. The same task removes
the custom domains of a deleted computer or deployment.
"""

from __future__ import annotations

import logging
import re

import trio

from corral.actors.bus import SubscriberLagged
from corral.actors.previews.desktops import COMPUTER_HOST_PATTERN
from corral.actors.previews.domains import PREVIEW_DOMAINS_CHANGED
from corral.actors.previews.urls import SANDBOX_HOST_PATTERN, service_domain

from . import store
from .service import remove_domains_of
from .services import CustomDomainServices
from .store import Owner

log = logging.getLogger("corral.domains.edge")

PREVIEW_DOMAINS_REFRESH = 5.0
FULL_RELOAD = 60.0
FOLLOWED = ("computer.created", "computer.deleted", "sandbox.created", "sandbox.destroyed", "deployment.deleted", "custom_domain.*")

_SANDBOX = re.compile(SANDBOX_HOST_PATTERN)
_COMPUTER = re.compile(COMPUTER_HOST_PATTERN)


class EdgeHosts:
    def __init__(self, platform: CustomDomainServices) -> None:
        self.platform = platform
        self.own_domain = service_domain(platform.settings)
        self.hosts: dict[str, dict[str, Owner]] = {"computer": {}, "sandbox": {}}
        self.preview_domains: dict[str, tuple[str, str]] = {}
        self.loaded = False
        self._stale = trio.Event()
        """Set when preview domains changed (on any node): the refresher reads them now."""
        self._everything_stale = False
        platform.notices.listen(PREVIEW_DOMAINS_CHANGED, self._preview_domains_changed)

    def _preview_domains_changed(self, subject: str | None) -> None:
        if subject is None:  # the notices' connection was lost: anything may have changed
            self._everything_stale = True
        self._stale.set()

    # -- the question ---------------------------------------------------------------

    def allows(self, name: str) -> bool:
        """Whether the edge may hold a certificate for `name`; False when unsure."""
        if not self.loaded:
            return False
        host = name.strip().lower().rstrip(".")
        if not host or len(host) > 253:
            return False
        if self.platform.custom_domains.routable(host) is not None:
            return True
        found = _SANDBOX.fullmatch(host)
        if found is not None and 1 <= int(found["port"]) <= 65535:
            return self._names_live("sandbox", found["slug"], found["domain"])
        found = _COMPUTER.fullmatch(host)
        if found is not None and self._names_live("computer", found["slug"], found["domain"]):
            return True
        sites = self.platform.deployment_sites
        return sites is not None and sites.live_deployment_host(host)

    async def allows_now(self, name: str) -> bool:
        """`allows`, but a sandbox or computer host memory does not know yet is looked up in
        the store once: its `created` event may still be on its way through the bus (a
        client that opens the host right after the create's answer), and a refusal would
        fail that client's TLS handshake."""
        if self.allows(name) or not self.loaded:
            return self.allows(name)
        host = name.strip().lower().rstrip(".")
        for kind, pattern in (("sandbox", _SANDBOX), ("computer", _COMPUTER)):
            found = pattern.fullmatch(host)
            if found is None or found["slug"] in self.hosts[kind]:
                continue
            owner = await store.live_host_named(self.platform.db, kind, found["slug"])
            if owner is not None:
                self.hosts[kind] = {**self.hosts[kind], found["slug"]: owner}
                return self.allows(name)
        return False

    def _names_live(self, kind: str, slug: str, domain: str) -> bool:
        owner = self.hosts[kind].get(slug)
        if owner is None:
            return False
        if domain == self.own_domain:
            return True
        scope = self.preview_domains.get(domain)
        if scope is None:
            return False
        scope_type, scope_id = scope
        return scope_id == {"tenant": owner.tenant_id, "workspace": owner.workspace_id, "project": owner.project_id}.get(scope_type)

    # -- keeping it current ---------------------------------------------------------

    async def reload(self) -> None:
        db = self.platform.db
        if self.loaded:
            await self.platform.custom_domains.reload(db)  # other nodes' changes
        self.hosts = await store.live_hosts(db)
        self.preview_domains = await store.preview_domain_scopes(db)
        self.loaded = True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the bus and refresh until cancelled; started once the index is loaded."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._follow)
            nursery.start_soon(self._refresh_preview_domains)
            task_status.started()

    async def _refresh_preview_domains(self) -> None:
        """One reader at a time, so an older read never lands after a newer one."""
        full_at = trio.current_time() + FULL_RELOAD
        while True:
            with trio.move_on_after(PREVIEW_DOMAINS_REFRESH):
                await self._stale.wait()
            self._stale = trio.Event()
            try:
                if self._everything_stale or trio.current_time() >= full_at:
                    self._everything_stale = False
                    full_at = trio.current_time() + FULL_RELOAD
                    await self.reload()
                else:
                    self.preview_domains = await store.preview_domain_scopes(self.platform.db)
            except Exception:
                log.exception("refreshing the TLS edge's hosts failed")
                await trio.sleep(1.0)

    async def _follow(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Subscribe first, then load: nothing that happens in between is missed. A lagging
        subscription (or a failing store) starts over the same way."""
        started = False
        while True:
            try:
                with self.platform.bus.subscribe(types=FOLLOWED) as subscription:
                    await self.reload()
                    if not started:
                        started = True
                        task_status.started()
                    async for event in subscription:
                        await self._apply(event.type, event.resource_type, event.resource_id)
                return  # the bus closed: the node is stopping
            except SubscriberLagged:
                log.warning("the TLS edge's host index lagged behind the bus; reloading")
            except Exception:
                log.exception("loading the TLS edge's hosts failed; trying again")
                await trio.sleep(1.0)

    async def _apply(self, event_type: str, kind: str, resource_id: str) -> None:
        try:
            if kind == "custom_domain":
                await self.platform.custom_domains.refresh(self.platform.db, resource_id)
                return
            if event_type == "deployment.deleted":
                await remove_domains_of(self.platform, "deployment_id", resource_id)
                return
            if kind not in self.hosts:
                return
            if event_type.endswith(".created"):
                found = await store.live_host(self.platform.db, kind, resource_id)
                if found is not None:
                    self.hosts[kind] = {**self.hosts[kind], found[0]: found[1]}
                return
            if kind == "computer":
                await remove_domains_of(self.platform, "computer_id", resource_id)
            await self.reload_kind(kind)
        except Exception:
            log.exception("following %s of %s %s failed", event_type, kind, resource_id)

    async def reload_kind(self, kind: str) -> None:
        self.hosts = {**self.hosts, kind: (await store.live_hosts(self.platform.db))[kind]}
