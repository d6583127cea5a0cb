"""The composition root: one Corral node, built and started part by part.

`open_node(settings)` opens the store (and migrates it), builds the services every
part shares into one `Platform`, then starts the parts in order: the actor system;
the runtime (re-adopting instances that outlived the last run) and interrupted
creations; each instance kind's background work; the one idle watcher; billing,
with each kind's billing hooks registered here; the webhook dispatcher. It stops
them in the reverse order. Nothing is found by a string key: what a part needs, it
is handed.

This module sits above `corral.actors` (DESIGN.md "Composition"): it imports the
parts; no part imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from corral.actors import (
    agent_profiles,
    agent_runs,
    billing,
    computers,
    databases,
    deployments,
    domains,
    egress,
    instances,
    nodes,
    sandboxes,
    templates,
    tenancy,
)
from corral.actors.agents import AgentPool
from corral.actors.billing import MeteringHandle
from corral.actors.billing.hooks import BillingHooks
from corral.actors.bus import EventBus
from corral.actors.computers.activity import Activity
from corral.actors.computers.services import MetricsSampling, ProfileResolver
from corral.actors.databases import DatabaseNode
from corral.actors.egress import PolicyHooks, check_operator_providers
from corral.actors.instances import MoveAway
from corral.actors.nodes import archives, lost, moves
from corral.actors.nodes.blobs import BlobSigner, ClusterBlobs
from corral.actors.nodes.leases import Leases, run_leased
from corral.actors.previews import AccessCache
from corral.actors.previews.router import PreviewRouter
from corral.actors.runtime import RuntimeHolder
from corral.actors.sandboxes.services import TemplateResolver
from corral.actors.system import ActorConfig, ActorSystem
from corral.actors.timings import OperationTimings
from corral.actors.webhooks import run_webhooks
from corral.actors.webhooks.runner import WebhookRuntime
from corral.config import ADMIN_KEY_PREFIX, Settings, SettingsError
from corral.net import HostNetwork, NetworkConfig, gateway_address
from corral.net.edge import caddy_binary, edge_config, edge_secret, run_edge_process
from corral.net.egress import DestinationPolicy, EgressCA, EgressProxy, EgressProxyConfig
from corral.net.pgproxy import DatabaseAccess, DatabaseProxy
from corral.net.preview import RouteTable
from corral.node_local import NodeLocal, OnThisNode
from corral.operations import NodeMetrics, run_metrics_listener
from corral.request_observers import RequestObservers
from corral.storage import (
    BlobStore,
    Database,
    EventLog,
    LocalBlobStore,
    Notices,
    RemoteEvents,
    SecretBox,
    SharedRateCounts,
    load_or_create_kek,
    migrate,
    open_database,
)
from corral.vm import EgressTrust
from corral.vm.postgres import PostgresDriver, traversable

log = logging.getLogger("corral")

EGRESS_PRUNE_SECONDS = 3600.0
"""How often audit rows past their retention (90 days) are deleted."""
EGRESS_PRUNE_LEASE = "egress-prune"
"""The cluster lease of the prune: one node deletes old audit rows, not each of them."""


@dataclass
class Platform:
    """The long-lived services of one node, as one object, every one typed.

    No part takes this type: each declares the narrow interface it needs (a
    `Protocol` in its `services` module), and this object satisfies all of them.
    The HTTP layer and integration tests hold it, so tests can drive actors directly.

    Its own fields are what every node of a cluster has alike: its settings, the
    store and its event log, the secrets every node derives from the same key and
    store. Everything else lives in this node's process only and is gathered in
    `local` (`corral.node_local.NodeLocal`, which says what each part is and how its
    copies are kept in step); its attributes read through as `platform.<name>`.
    """

    settings: Settings
    db: Database
    events: EventLog
    secrets: SecretBox
    """Sealed secrets; every node has the same key-encryption key (README)."""
    jwt_secret: str
    """Signs tokens and derives the nodes' shared keys; one for the cluster, in the store."""
    admin_key_digest: str
    local: NodeLocal
    """What this node keeps to itself."""

    nursery = OnThisNode[trio.Nursery]()
    runtime = OnThisNode[RuntimeHolder]()
    agents = OnThisNode[AgentPool]()
    bus = OnThisNode[EventBus]()
    blobs = OnThisNode[BlobStore]()
    notices = OnThisNode[Notices]()
    egress_proxy = OnThisNode[EgressProxy | None]()
    system = OnThisNode[ActorSystem]()
    databases = OnThisNode[DatabaseNode]()
    warm_pool = OnThisNode[sandboxes.WarmPool | None]()
    leases = OnThisNode[Leases]()
    metering = OnThisNode[MeteringHandle | None]()
    billing_hooks = OnThisNode[BillingHooks]()
    computer_activity = OnThisNode[Activity | None]()
    computer_metrics = OnThisNode[MetricsSampling | None]()
    webhooks = OnThisNode[WebhookRuntime | None]()
    preview_polls = OnThisNode[set[str]]()
    rate_counts = OnThisNode[SharedRateCounts | None]()
    preview_access = OnThisNode[AccessCache | None]()
    preview_router = OnThisNode[PreviewRouter | None]()
    preview_route_plugins = OnThisNode[list[Callable[[RouteTable], None]]]()
    custom_domains = OnThisNode[domains.DomainMap]()
    deployment_sites = OnThisNode[deployments.DeploymentSites | None]()
    edge_hosts = OnThisNode[domains.EdgeHosts | None]()
    edge_secret = OnThisNode[str]()
    sandbox_templates = OnThisNode[TemplateResolver | None]()
    agent_runtime_profiles = OnThisNode[ProfileResolver | None]()
    run_profiles = OnThisNode[agent_runs.RunProfiles | None]()
    request_observers = OnThisNode[RequestObservers]()
    operation_timings = OnThisNode[OperationTimings]()
    metrics = OnThisNode[NodeMetrics | None]()

    def is_bootstrap_admin_key(self, token: str) -> bool:
        candidate = hashlib.sha256(token.encode()).hexdigest()
        return hmac.compare_digest(candidate, self.admin_key_digest)


def bootstrap_admin_key(settings: Settings) -> str:
    """`CORRAL_ADMIN_KEY`, or the key in `<data-dir>/admin-key`, generated on first start."""
    if settings.admin_key:
        return settings.admin_key
    path = Path(settings.data_dir) / "admin-key"
    if path.exists():
        return path.read_text().strip()
    key = ADMIN_KEY_PREFIX + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    log.info("generated the admin key in %s", path)
    return key


async def _jwt_secret(db: Database, configured: str | None) -> str:
    """One signing secret shared by every node through the store."""
    if configured:
        return configured
    fresh = secrets.token_urlsafe(48)
    sql = (
        "INSERT INTO platform_settings (key, value) VALUES ('jwt_secret', ?)"
        " ON CONFLICT (key) DO NOTHING"
    )
    await db.execute(sql, (fresh,))
    value = await db.fetch_value("SELECT value FROM platform_settings WHERE key = 'jwt_secret'")
    return str(value)


def host_network(settings: Settings, nursery: trio.Nursery | None = None) -> HostNetwork:
    """This node's instance network (`net`), which the runtime (`vm`) is handed; with a
    nursery it runs the node's DNS forwarder there (asking `CORRAL_DNS_SERVERS`, else
    the system's resolvers)."""
    upstream = dns_servers(settings)
    return HostNetwork(
        NetworkConfig(
            state_dir=Path(settings.data_dir) / "network",
            bridge=settings.bridge,
            subnet=settings.subnet,
            nft_table=settings.nft_table,
            link_prefix=settings.link_prefix,
            netns_prefix=settings.netns_prefix,
            dns_forwarder=nursery is not None,
            upstream_dns=upstream,
            egress_port=settings.egress_port if settings.egress_proxy else None,
            allow_private_destinations=settings.allow_private_destinations,
            open_destinations=settings.egress_allowed_destinations,
        ),
        nursery,
    )


def dns_servers(settings: Settings) -> tuple[str, ...]:
    """`CORRAL_DNS_SERVERS` as a tuple (empty: the system's resolvers)."""
    return tuple(server.strip() for server in settings.dns_servers.split(",") if server.strip())


def node_network(settings: Settings, nursery: trio.Nursery, proxy: EgressProxy | None) -> HostNetwork:
    """The host network, made when the first instance needs it; from then on the egress
    proxy resolves names through its DNS forwarder, so an instance's name means the same
    address to the proxy (and feeds the same hostname rules) as to the instance."""
    network = host_network(settings, nursery)
    if proxy is not None:
        proxy.resolver = network.dns.addresses
    return network


def _loopback(host: str) -> str:
    """Where this node's own API answers locally."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "localhost") else host


def database_dir(settings: Settings) -> Path:
    """`CORRAL_DATABASE_DIR`, else under the data directory when the servers' own users can
    reach it, else a directory of this data directory's own under /var/lib/corral."""
    if settings.database_dir is not None:
        return Path(settings.database_dir).absolute()
    default = Path(settings.data_dir) / "databases"
    if traversable(default):
        return default
    digest = hashlib.sha256(str(Path(settings.data_dir).absolute()).encode()).hexdigest()[:12]
    return Path("/var/lib/corral") / f"databases-{digest}"


def database_node(settings: Settings) -> DatabaseNode:
    """The database servers' runtime, their proxy (URL host and bridge address) and access rules."""
    host = settings.database_host or (settings.host if settings.host not in ("0.0.0.0", "::", "") else "127.0.0.1")
    return DatabaseNode(
        driver=PostgresDriver(
            database_dir(settings), f"{settings.cgroup_parent}-db", disk_reserve_bytes=round(settings.disk_reserve_gb * 1024**3)
        ),
        proxy=DatabaseProxy(),
        access=DatabaseAccess(settings.nft_table, gateway_address(settings.subnet)),
        host=host,
        internal_host=gateway_address(settings.subnet),
        ports=databases.parse_ports(settings.database_ports),
    )


def egress_proxy(settings: Settings) -> EgressProxy | None:
    """The node's egress proxy on the bridge address, with its CA under the data directory."""
    if not settings.egress_proxy:
        return None
    config = EgressProxyConfig(
        listen_host=gateway_address(settings.subnet),
        port=settings.egress_port,
        destinations=DestinationPolicy.build(
            settings.allow_private_destinations, settings.egress_allowed_destinations, (settings.subnet,)
        ),
        ca_bundle=settings.ca_bundle,
        dns_servers=dns_servers(settings),
        platform_upstream=(_loopback(settings.host), settings.port),
        platform_paths=(agent_runs.USAGE_PATH,),
    )
    return EgressProxy(config, EgressCA(Path(settings.data_dir) / "egress-ca"))


async def _start_egress(platform: Platform) -> None:
    """Listen for instances' HTTP(S); a node that cannot bind says so and runs on without it."""
    proxy = platform.egress_proxy
    if proxy is None:
        return
    try:
        await platform.nursery.start(proxy.serve)
    except OSError as exc:
        log.error("the egress proxy cannot listen on %s:%s: %s", proxy.config.listen_host, proxy.config.port, exc)


async def _start_metrics(platform: Platform) -> None:
    """`CORRAL_METRICS_PORT`: count from now on and serve `GET /metrics` there; unset,
    nothing is counted (every hook stays a no-op)."""
    port = platform.settings.metrics_port
    if port is None:
        return
    platform.metrics = NodeMetrics(platform)
    platform.metrics.install()
    await platform.nursery.start(run_metrics_listener, platform.metrics, platform.settings.host, port)
    log.info("Corral metrics listening on http://%s:%d/metrics", platform.settings.host, port)


async def _join_cluster(platform: Platform) -> None:
    """This node's row in `nodes` (contract §20), then its heartbeat."""
    platform.system.register(*nodes.ACTORS)
    nodes.hear_home_moves(platform.notices, platform.system.retire)
    tenancy.api_keys.hear_revocations(platform.notices, platform.db)
    await nodes.join(platform)
    await platform.nursery.start(nodes.keep_alive, platform)
    await platform.nursery.start(platform.leases.run)


async def _forget_orphan(platform: Platform, kind: str, resource_id: str) -> None:
    """A resource another node took over while this one was cut off: its actor here stops,
    and a database's clients no longer reach the server here (its proxy and fast path)."""
    platform.system.retire(kind, resource_id)
    if kind == databases.DatabaseActor.kind:
        platform.databases.proxy.forget(resource_id)
        await platform.databases.access.close_fast_path(resource_id)


async def _start_parts(platform: Platform) -> None:
    """Re-adopt instances that outlived the last run, finish interrupted creations,
    and start each part's background work."""
    platform.system.register(*sandboxes.ACTORS)
    platform.system.register(*databases.ACTORS)
    sandboxes.register_with_billing(platform)
    computers.register_with_billing(platform)
    await platform.nursery.start(platform.request_observers.run)  # metrics and access lines, in batches
    if platform.settings.prepare_templates:
        platform.nursery.start_soon(platform.runtime.prepare_templates)
    if platform.runtime.has_instances():
        await platform.runtime.driver()
    if platform.leases.shared:  # before anything adopts what other nodes took while this one was lost
        await platform.nursery.start(
            partial(lost.check_orphans_forever, forget=partial(_forget_orphan, platform)),
            platform.db, platform.settings.node_name, platform.runtime, platform.databases.driver,
        )
    if platform.settings.warm_pool > 0:
        platform.warm_pool = sandboxes.WarmPool(platform.settings, platform.runtime, platform.agents)
        await platform.nursery.start(platform.warm_pool.run, platform.db)
    recovered = await sandboxes.recover_interrupted(platform)
    if recovered:
        log.info("resumed %d interrupted sandbox creation(s)", recovered)
    await sandboxes.start_background(platform)
    platform.system.register(*templates.ACTORS)
    interrupted_builds = await templates.recover_interrupted(platform)
    if interrupted_builds:
        log.info("%d template build(s) were interrupted by the last stop", interrupted_builds)
    await templates.sweep_unused_files(platform)
    templates.hear_deletions(platform, platform.nursery)
    await platform.nursery.start(templates.sweep_forever, platform)
    await computers.start_background(platform)
    platform.system.register(*agent_runs.ACTORS)
    resumed = await agent_runs.resume_runs(platform)
    if resumed:
        log.info("following %d agent run(s) again", resumed)
    watches = [sandboxes.idle_watch(), computers.idle_watch(platform)]
    await platform.nursery.start(
        partial(instances.watch_idle, node=platform.settings.node_name),
        platform.db, platform.system, watches, lambda: platform.settings.idle_check_seconds,
    )
    await platform.nursery.start(egress.forget_gone_resources, platform)
    platform.edge_secret = edge_secret(platform.settings.data_dir, platform.settings.edge_secret)
    platform.edge_hosts = domains.EdgeHosts(platform)
    await platform.nursery.start(domains.start, platform, platform.edge_hosts, platform.edge_secret)
    await platform.nursery.start(
        run_leased, platform.leases, EGRESS_PRUNE_LEASE, partial(egress.prune, platform.db), lambda: EGRESS_PRUNE_SECONDS,
        "egress audit retention",
    )
    await databases.start_background(platform)
    await _start_deployments(platform)
    await _take_over_lost_nodes(platform)


async def _take_over_lost_nodes(platform: Platform) -> None:
    """On a store several nodes share: the node holding the lease takes over the
    resources of lost nodes, through each one's actor (`corral.actors.nodes.lost`), and
    the one holding another has a lost copy of an archive made again elsewhere
    (`corral.actors.nodes.archives`);
    every node moves its own resources off itself while it drains, and makes those
    moved to it (`corral.actors.nodes.moves`), and keeps its primaries waiting for their
    replicas on other nodes (`corral.actors.databases.replication`)."""
    if not platform.leases.shared:
        return
    kinds = {
        "sandboxes": sandboxes.SandboxActor, "computers": computers.ComputerActor, "databases": databases.DatabaseActor,
        "sandbox_template_builds": templates.BuildActor, "deployment_services": deployments.DeploymentServiceActor,
    }
    async def sweep() -> None:
        await lost.sweep(
            platform.db, platform.system, platform.settings.node_name, kinds, agent_runs.AgentRunActor,
            {"databases": databases.DEFERRED},
        )
        gone = await lost.lost_nodes(platform.db, platform.settings.node_name)
        if gone:  # their publishes under way end; the deployments keep serving what they served
            await deployments.fail_interrupted(platform, gone, f"node {', '.join(gone)} was lost during the publish")

    await platform.nursery.start(
        run_leased, platform.leases, lost.LEASE, sweep, lambda: lost.SWEEP_SECONDS, "taking over lost nodes' resources",
    )
    await platform.nursery.start(
        run_leased, platform.leases, archives.LEASE,
        partial(archives.keep_two_copies, platform.blobs, platform.db, platform.settings.node_name),
        lambda: archives.CHECK_SECONDS, "keeping archives on two nodes",
    )
    await platform.nursery.start(
        databases.promote_forever, platform.db, platform.system, platform.settings.node_name, databases.DatabaseActor
    )
    await platform.nursery.start(
        databases.keep_waiting_forever, platform.db, platform.system, platform.settings.node_name,
        platform.databases.driver, databases.DatabaseActor,
    )
    movable = {"sandboxes": sandboxes.SandboxActor, "computers": computers.ComputerActor, "databases": databases.DatabaseActor}
    await platform.nursery.start(moves.move_forever, platform.db, platform.system, platform.settings.node_name, movable, MoveAway)
    await platform.nursery.start(moves.adopt_forever, platform.db, platform.system, platform.settings.node_name, movable)


async def _hear_other_nodes(platform: Platform) -> None:
    """On a PostgreSQL store (several nodes), this node's subscribers (SSE, webhooks,
    the parts that follow events) also get the events the other nodes publish."""
    if platform.db.dialect != "postgresql":
        return
    remote = RemoteEvents(platform.events, platform.bus.deliver)
    platform.bus.published_here = remote.published_here
    platform.db.later.delay = RemoteEvents.commit_delay  # the others hear an event once it commits
    await platform.nursery.start(remote.run)


async def _start_deployments(platform: Platform) -> None:
    """Route every live deployment (services re-adopted by their actors on the way), and
    on a shared store boot the services other nodes' publishes placed here."""
    platform.system.register(*deployments.ACTORS)
    deployments.register_with_billing(platform)
    sites = deployments.DeploymentSites(platform)
    platform.deployment_sites = sites
    interrupted = await deployments.fail_interrupted(platform)
    if interrupted:
        log.info("%d publish(es) cut off by the last stop failed", interrupted)
    routed = await sites.load_all()
    if routed:
        log.info("routing %d deployment(s)", routed)
    if platform.leases.shared:  # services a publish on another node placed here
        await platform.nursery.start(deployments.placed_services_forever, platform)
        await platform.nursery.start(deployments.relocate_forever, platform)


def check_edge() -> None:
    """`corral serve --edge` needs Caddy: a `SettingsError` (said, exit 2) before anything starts."""
    try:
        caddy_binary()
    except FileNotFoundError as exc:
        raise SettingsError(str(exc)) from None


async def run_edge(settings: Settings, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The TLS edge (Caddy) in front of this node's preview router (`corral serve --edge`)."""
    await run_edge_process(edge_config(settings), task_status=task_status)


@contextlib.asynccontextmanager
async def open_node(settings: Settings) -> AsyncIterator[Platform]:
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    check_operator_providers(settings.oauth_providers)
    db = open_database(settings.database_url)
    try:
        await migrate(db)
        admin_key = bootstrap_admin_key(settings)
        events = EventLog(db, settings.event_retention_seconds)
        async with trio.open_nursery() as nursery:
            await nursery.start(db.later.run)  # events, audit rows, activity: behind the answers
            proxy = egress_proxy(settings)
            trust = EgressTrust(proxy.config.port, proxy.ca.cert_pem.decode()) if proxy is not None else None
            platform = Platform(
                settings=settings,
                db=db,
                events=events,
                secrets=SecretBox(load_or_create_kek(data_dir / "kek")),
                jwt_secret=await _jwt_secret(db, settings.jwt_secret),
                admin_key_digest=hashlib.sha256(admin_key.encode()).hexdigest(),
                local=NodeLocal(
                    nursery=nursery,
                    bus=EventBus(events),
                    runtime=RuntimeHolder(settings, partial(node_network, settings, nursery, proxy), trust),
                    agents=AgentPool(settings.agent_timeout),
                    blobs=LocalBlobStore(data_dir / "blobs"),
                    notices=Notices(db, events.origin),
                    egress_proxy=proxy,
                ),
            )
            if db.dialect == "postgresql":  # a blob another node wrote is fetched from it on first read
                platform.blobs = ClusterBlobs(LocalBlobStore(data_dir / "blobs"), db, BlobSigner(platform.jwt_secret, settings.node_name))
            platform.databases = database_node(settings)
            if db.dialect == "postgresql":  # replicas on other nodes derive their primary's password (issue 30)
                platform.databases.driver.replication_secret = hmac.new(
                    platform.jwt_secret.encode(), b"corral database replication v1", hashlib.sha256
                ).digest()
            platform.leases = Leases(db, settings.node_name, shared=db.dialect == "postgresql")
            platform.agent_runtime_profiles = agent_profiles.ProfileResolver()
            platform.run_profiles = agent_profiles.RunProfileResolver(platform)
            platform.sandbox_templates = templates.TemplateResolver()
            if db.dialect == "postgresql":
                platform.rate_counts = SharedRateCounts(db, settings.node_name)
            platform.system = ActorSystem(
                db,
                bus=platform.bus,
                services=platform,
                config=ActorConfig(shutdown_grace=settings.shutdown_grace_seconds),
            )
            await _hear_other_nodes(platform)  # before anything subscribes or publishes
            await nursery.start(platform.notices.run)  # before any routing table is loaded
            await nursery.start(platform.system.run)
            await _join_cluster(platform)  # first: a second node on a SQLite store stops here
            await _start_metrics(platform)
            if proxy is not None:
                proxy.hooks = PolicyHooks(platform, platform.runtime)
            await _start_egress(platform)
            await _start_parts(platform)
            await billing.start_metering(platform)  # billing charges running instances
            await nursery.start(run_webhooks, platform)
            try:
                yield platform
            finally:
                billing.stop_metering(platform)
                with trio.move_on_after(settings.shutdown_grace_seconds + 1) as scope:
                    scope.shield = True
                    if platform.webhooks is not None:  # first: no delivery starts while the node stops
                        platform.webhooks.worker.drain()
                    if platform.warm_pool is not None:
                        await platform.warm_pool.stop()
                    await platform.leases.release()  # the other nodes take this one's jobs at once
                    await nodes.leave(platform)  # lost at once, not 6 s from now
                    await platform.system.shutdown()
                    await platform.agents.aclose()
                    await platform.runtime.aclose()
                nursery.cancel_scope.cancel()
    finally:
        await db.close()
