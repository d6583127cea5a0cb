"""The router's table of deployment hosts, in memory: `{slug}.{domain}` and
`v{n}-{slug}.{domain}`.

One entry per live deployment, rebuilt from the store by `reload` whenever its
deployment actor changes what it serves, and swapped in with one assignment: a
request in flight holds the entry it looked up, so during a promote each request
sees the old or the new version, never a half-made table. Static versions are
served from their unpacked artifact by the router itself; service versions are
forwarded to their deployment service's instance.

The router asks `resolve` first for every `{label}.{domain}` host (the same host
form as computers' desktops: slugs are unique across deployments, computers and
sandboxes); None means "not a deployment", and the computer resolver answers.
`live_deployment_host` and `deployment_host` are the domains part's interface:
a synchronous in-memory answer to "does this host name a live deployment", and
a deployment's own host (a custom domain's `verification_target`).

Every node routes every deployment; a service version whose service runs on another
node is relayed to that node's router (`corral.actors.previews.remote`). The node whose actor changed what a deployment
serves reloads its entry, then tells the other nodes (`SITE_CHANGED`, a notice:
not every such change has an event), which reload theirs; a change of preview
domains reloads every entry.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import trio

from corral.actors.previews import domains as preview_domains
from corral.actors.previews.remote import RemoteRouters
from corral.actors.previews.urls import service_domain
from corral.config import Settings
from corral.net.links import netns_path
from corral.net.preview import Decision, Forward, PreviewRequest, Upstream, page
from corral.storage import Database

from . import artifacts, store
from .messages import Connect
from .service_actor import DeploymentServiceActor
from .service_store import ServiceRecord, running_service_of
from .services import DeploymentServices
from .static_site import FileCache, StaticSite
from .store import DeploymentRecord, VersionRecord

RELAYED_REFRESH_SECONDS = 0.5
"""How often a relayed request that finds no upstream here may re-read its deployment."""

log = logging.getLogger("corral.deployments.sites")

SITE_CHANGED = "deployment.site"
"""Notice topic (`corral.storage.Notices`): what this deployment serves changed."""

VERSION_LABEL = re.compile(r"v(?P<number>[0-9]{1,9})-(?P<slug>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)")
HOST = re.compile(r"(?P<label>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\.(?P<domain>[a-z0-9.-]+)")


@dataclass(frozen=True, slots=True)
class Target:
    """What one version serves: its static files, or its service's upstream."""

    version_id: str
    number: int
    site: StaticSite | None = None
    upstream: Upstream | None = None
    home: Upstream | None = None
    """The preview router of the node that runs the version's service, when another."""


@dataclass(frozen=True, slots=True)
class SiteEntry:
    deployment_id: str
    slug: str
    name: str
    domains: frozenset[str]
    active: Target | None
    versions: dict[int, Target] = field(hash=False)


def deployment_host(settings: Settings, deployment: DeploymentRecord) -> str:
    """The deployment's own host on the public domain: `{slug}.{public domain}`."""
    return f"{deployment.slug}.{service_domain(settings)}"


async def public_url(db: Database, settings: Settings, deployment: DeploymentRecord) -> str:
    """The first active custom domain (over HTTPS, through the edge), else
    `{scheme}://{slug}.{domain}` by preview-domain precedence (contract §12)."""
    custom = await store.custom_domains(db, deployment.id)
    if custom:
        return f"https://{custom[0]}"
    domain = await preview_domains.url_domain(db, settings, deployment.tenant_id, deployment.workspace_id, deployment.project_id)
    return settings.preview_origin(f"{deployment.slug}.{domain}")


async def version_url(db: Database, settings: Settings, deployment: DeploymentRecord, version: VersionRecord) -> str:
    domain = await preview_domains.url_domain(db, settings, deployment.tenant_id, deployment.workspace_id, deployment.project_id)
    return settings.preview_origin(f"v{version.version_number}-{deployment.slug}.{domain}")


class DeploymentSites:
    def __init__(self, platform: DeploymentServices) -> None:
        self.platform = platform
        self.root = Path(platform.settings.data_dir) / "sites"
        self.cache = FileCache()
        self.remote = RemoteRouters(platform)
        self._by_slug: dict[str, SiteEntry] = {}
        self._slug_of: dict[str, str] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._reloading: dict[str, trio.Lock] = {}
        self._relayed_refresh: dict[str, float] = {}
        platform.notices.listen(SITE_CHANGED, self._changed_elsewhere)
        platform.notices.listen(preview_domains.PREVIEW_DOMAINS_CHANGED, lambda _: self.domains_changed())

    # -- building the table ----------------------------------------------------------

    async def load_all(self) -> int:
        """At start: every live deployment's entry (and the entries of deployments no
        longer live dropped, after another node's notices may have been missed)."""
        deployments = await store.live(self.platform.db)
        live = {deployment.id for deployment in deployments}
        for deployment_id in [known for known in self._slug_of if known not in live]:
            await self.refresh(deployment_id)
        for deployment in deployments:
            try:
                await self.refresh(deployment.id)
            except Exception:
                log.exception("deployment %s could not be routed", deployment.id)
        return len(deployments)

    def _changed_elsewhere(self, deployment_id: str | None) -> None:
        """Another node's actor changed this deployment (None: notices may have been missed)."""
        if deployment_id is None:
            self.platform.nursery.start_soon(self.load_all)
        else:
            self.platform.nursery.start_soon(self._refresh_logged, deployment_id)

    async def _refresh_logged(self, deployment_id: str) -> None:
        try:
            await self.refresh(deployment_id)
        except Exception:
            log.exception("deployment %s could not be routed", deployment_id)

    def domains_changed(self) -> None:
        """Preview domains changed: every entry's routable domains are read again."""
        self.platform.nursery.start_soon(self.load_all)

    async def adopt(self, sha256: str, staging: Path) -> Path:
        """A tree `pack` copied while packing becomes the artifact's unpacked files."""
        lock = self._locks.setdefault(sha256, trio.Lock())
        async with lock:
            await trio.to_thread.run_sync(artifacts.adopt_tree, staging, self.root / sha256)
        return self.root / sha256

    async def prepare(self, sha256: str) -> Path:
        """The artifact unpacked under `sites/<sha256>` (verified against its digest first)."""
        destination = self.root / sha256
        if destination.exists():
            return destination
        lock = self._locks.setdefault(sha256, trio.Lock())
        async with lock:
            if not destination.exists():
                tar = await self.platform.blobs.verified_path(sha256)
                await trio.to_thread.run_sync(artifacts.unpack, tar, destination)
        return destination

    async def _target(self, version: VersionRecord) -> Target | None:
        if version.kind == "static" and version.artifact_sha256:
            root = await self.prepare(version.artifact_sha256)
            site = StaticSite(version.artifact_sha256, root, version.artifact_manifest or {}, self.cache)
            return Target(version.id, version.version_number, site=site)
        if version.kind == "service":
            service = await running_service_of(self.platform.db, version.id)
            home = await self.remote.home_of(service.node) if service is not None else None
            if home is not None:  # its instance is on that node: relayed to its router
                return Target(version.id, version.version_number, home=home)
            upstream = await self._upstream(service) if service is not None else None
            return Target(version.id, version.version_number, upstream=upstream)
        return None

    async def _upstream(self, service: ServiceRecord) -> Upstream | None:
        if not self.platform.runtime.holds(service.id):
            return None  # not running here (a lost node's, or one still booting)
        address = await _service_address(self.platform, service.id)
        if address is None:
            return None
        netns = netns_path(f"{self.platform.settings.netns_prefix}{service.id}")
        return Upstream(address, service.port, netns, f"service {service.id}")

    async def reload(self, deployment_id: str) -> None:
        """What the deployment serves changed here: swap this node's entry, then tell
        the other nodes to swap theirs."""
        try:
            await self.refresh(deployment_id)
        finally:
            self.platform.notices.tell_others(SITE_CHANGED, deployment_id)

    async def refresh(self, deployment_id: str) -> None:
        """Re-read one deployment and swap its entry (or drop it when deleted). One reload
        of a deployment at a time: a slower, older read never lands after a newer one."""
        lock = self._reloading.setdefault(deployment_id, trio.Lock())
        async with lock:
            await self._reload(deployment_id)

    def _may_refresh(self, deployment_id: str) -> bool:
        """At most one refresh a deployment per `RELAYED_REFRESH_SECONDS` for relayed
        requests that find no upstream (a service that really is down costs no store read
        per request)."""
        now = trio.current_time()
        if now - self._relayed_refresh.get(deployment_id, -RELAYED_REFRESH_SECONDS) < RELAYED_REFRESH_SECONDS:
            return False
        if len(self._relayed_refresh) > 10_000:
            self._relayed_refresh.clear()
        self._relayed_refresh[deployment_id] = now
        return True

    async def _reload(self, deployment_id: str) -> None:
        db = self.platform.db
        deployment = await store.load(db, deployment_id)
        old_slug = self._slug_of.get(deployment_id)
        if deployment is None or deployment.state == "deleted":
            if old_slug is not None:
                self._by_slug.pop(old_slug, None)
                self._slug_of.pop(deployment_id, None)
            return
        versions: dict[int, Target] = {}
        active: Target | None = None
        for version in await store.live_versions(db, deployment_id):
            target = await self._target(version)
            if target is None:
                continue
            versions[version.version_number] = target
            if version.id == deployment.active_version_id:
                active = target
        names = await preview_domains.routable_domains(
            db, self.platform.settings, deployment.tenant_id, deployment.workspace_id, deployment.project_id
        )
        entry = SiteEntry(deployment.id, deployment.slug, deployment.name, names, active, versions)
        self._by_slug[deployment.slug] = entry  # one assignment: the switch
        self._slug_of[deployment_id] = deployment.slug

    # -- answering the router --------------------------------------------------------

    def _find(self, label: str, domain: str) -> tuple[SiteEntry, int | None] | None:
        entry = self._by_slug.get(label)
        number: int | None = None
        if entry is None:
            found = VERSION_LABEL.fullmatch(label)
            if found is None:
                return None
            entry = self._by_slug.get(found["slug"])
            number = int(found["number"])
        if entry is None or domain not in entry.domains:
            return None
        return entry, number

    def live_deployment_host(self, host: str) -> bool:
        """Whether `host` (`{slug}.{domain}` or `v{n}-{slug}.{domain}`) serves a live
        deployment's version now. From memory only: no store, no DNS."""
        parsed = HOST.fullmatch(host.lower().rstrip("."))
        if parsed is None:
            return False
        found = self._find(parsed["label"], parsed["domain"])
        if found is None:
            return False
        entry, number = found
        return entry.active is not None if number is None else number in entry.versions

    async def resolve(self, request: PreviewRequest, match: re.Match[str] | None) -> Decision | None:
        """The answer for a deployment's host, or None when the host is not one."""
        assert match is not None
        found = self._find(match["slug"], match["domain"])
        if found is None:
            return None
        entry, number = found
        target = entry.active if number is None else entry.versions.get(number)
        if request.relayed and target is not None and target.site is None and target.upstream is None and self._may_refresh(entry.deployment_id):
            # Another node's table says the service runs here, and this one's does not yet
            # (a service that just became healthy here: the notice is on its way): read it now.
            await self.refresh(entry.deployment_id)
            found = self._find(match["slug"], match["domain"])
            if found is None:
                return None
            entry, number = found
            target = entry.active if number is None else entry.versions.get(number)
        if target is None:
            what = "has no published version yet" if number is None else f"has no version {number} that serves"
            return page(404, "no_version", "Nothing published here", f"Deployment {entry.name} {what}.")
        if target.site is not None:
            return await target.site.reply(request.method, request.target, request.header("if-none-match"))
        if target.home is not None and not request.relayed:
            return self.remote.relay(target.home, request.peer, f"version {target.number} of {entry.name}")
        if target.upstream is None:
            return page(503, "service_unavailable", "The service is not running", f"Version {target.number} of {entry.name} has no running service.")
        return Forward(target.upstream)


async def _service_address(platform: DeploymentServices, service_id: str) -> str | None:
    try:
        ref = await platform.system.get(DeploymentServiceActor, service_id)
        info = await ref.ask(Connect())
    except Exception as exc:
        log.debug("no address for service %s: %s", service_id, exc)
        return None
    address: str | None = info.address
    return address
