"""Prometheus metrics of one node (contract §19; the list is in docs/api.md "Metrics").

`NodeMetrics(platform)` owns a `CollectorRegistry` of its own (several nodes share a
test process; the library's global registry would mix them). What happens on a hot
path is counted where it happens and cheaply: HTTP requests through the request
observer hook (`corral.http.observe`), instance operations through
`Platform.operation_timings`, store queries through `Database.query_observer`, the
egress proxy's added latency through its `on_overhead`. Everything else is read at
scrape time from the parts' live state by custom collectors (actors, event bus,
runtime driver, egress proxy, webhook worker, store pool, node capacity); figures
that live in the store (instances by status, webhook queue, credits) are refreshed by
`refresh()`, which the metrics listener awaits before each exposition.

Labels are bounded: route templates (never paths), methods, status codes, kinds,
states, outcomes, reasons. The one per-instance family (CPU, memory, pids) carries
the runtime's instance id, for at most `PER_INSTANCE_LIMIT` running instances of this
node: what one node can run, not what tenants can ask for.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.actors.node_status import INSTANCE_TABLES, data_disk
from corral.actors.runtime import memory_available_mb, memory_total_mb
from corral.storage import utc_now_iso

if TYPE_CHECKING:
    from corral.http.observe import RequestRecord
    from corral.node import Platform

log = logging.getLogger("corral.metrics")

PER_INSTANCE_LIMIT = 200
"""Running instances whose own CPU, memory and pids are exported (the rest are counted only)."""
REFRESH_SECONDS = 2.0
"""Store-derived figures are read at most this often, however many scrapers there are."""

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Up to 300 s: an exec may run that long (its maximum timeout), and a slow one must show as slow."""
OPERATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
QUERY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
PROXY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)



class NodeMetrics:
    """The registry of one node and the hooks that feed it (`install`)."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = PromCounter(
            "corral_http_requests", "API requests answered, by route template, method and status.",
            ("route", "method", "status"), registry=self.registry,
        )
        self.request_seconds = Histogram(
            "corral_http_request_duration_seconds", "Time to answer an API request, by route template and method.",
            ("route", "method"), buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.response_bytes = PromCounter(
            "corral_http_response_bytes", "Bytes of API response bodies, by route template.",
            ("route",), registry=self.registry,
        )
        self.operation_seconds = Histogram(
            "corral_instance_operation_duration_seconds",
            "Instance operations (create, start, stop, exec, fork, wake, backup) by kind and outcome.",
            ("kind", "operation", "outcome"), buckets=OPERATION_BUCKETS, registry=self.registry,
        )
        self.query_seconds = Histogram(
            "corral_store_query_duration_seconds",
            "Store calls: `transaction` (worker thread, its wait included) and `read` (SQLite on the event loop).",
            ("operation",), buckets=QUERY_BUCKETS, registry=self.registry,
        )
        self.egress_overhead = Histogram(
            "corral_egress_added_latency_seconds",
            "The egress proxy's own time before forwarding an allowed request (policy, DNS, headers).",
            buckets=PROXY_BUCKETS, registry=self.registry,
        )
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any, Any]] = {}
        self._query_children: dict[str, Any] = {}
        self.store = StoreFigures(platform)
        self.registry.register(ActorCollector(platform))
        self.registry.register(PartsCollector(platform))
        self.registry.register(NodeCollector(platform, self.store))
        self.registry.register(self.store)

    def install(self) -> None:
        """Hook the counters into the node's parts (each hook is a no-op until set)."""
        platform = self.platform
        platform.request_observers.append(self.observe_request)
        platform.operation_timings.observers.append(self.observe_operation)
        platform.db.query_observer = self.observe_query
        if platform.egress_proxy is not None:
            platform.egress_proxy.on_overhead = self.egress_overhead.observe

    def observe_request(self, record: RequestRecord) -> None:
        key = (record.route, record.method, record.status)
        children = self._request_children.get(key)
        if children is None:  # once per route, method and status: `labels()` is the costly part
            route, method, status = key
            children = (
                self.requests.labels(route, method, str(status)),
                self.request_seconds.labels(route, method),
                self.response_bytes.labels(route),
            )
            self._request_children[key] = children
        requests, seconds, size = children
        requests.inc()
        seconds.observe(record.duration_seconds)
        size.inc(record.response_bytes)

    def observe_operation(self, kind: str, operation: str, outcome: str, seconds: float) -> None:
        self.operation_seconds.labels(kind, operation, outcome).observe(seconds)

    def observe_query(self, operation: str, seconds: float) -> None:
        child = self._query_children.get(operation)
        if child is None:
            child = self._query_children[operation] = self.query_seconds.labels(operation)
        child.observe(seconds)

    async def refresh(self) -> None:
        """Read the store-derived figures (at most every `REFRESH_SECONDS`)."""
        await self.store.refresh()


class ActorCollector(Collector):
    """Live actors by kind and status, mailbox depth, restarts, crashes and give-ups."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def collect(self) -> Iterable[Metric]:
        system = self.platform.system
        actors = GaugeMetricFamily("corral_actors", "Live actors by kind and status.", labels=("kind", "status"))
        depth = GaugeMetricFamily("corral_actor_mailbox_messages", "Messages queued in live actors' mailboxes, by kind.", labels=("kind",))
        deepest = GaugeMetricFamily("corral_actor_mailbox_depth_max", "The fullest mailbox of each kind.", labels=("kind",))
        busy = GaugeMetricFamily("corral_actor_busy", "Actors handling a message now, by kind.", labels=("kind",))
        restarts = CounterMetricFamily("corral_actor_restarts", "Actor restarts after a crash, by kind.", labels=("kind",))
        crashes = CounterMetricFamily("corral_actor_crashes", "Actor crashes, by kind.", labels=("kind",))
        failures = CounterMetricFamily(
            "corral_actor_failures", "Supervisor give-ups after repeated crashes (the resource is marked error), by kind.", labels=("kind",)
        )
        by_status: Counter[tuple[str, str]] = Counter()
        queued: Counter[str] = Counter()
        maximum: Counter[str] = Counter()
        working: Counter[str] = Counter()
        restarted = Counter(system.retired.restarts)
        crashed = Counter(system.retired.crashes)
        for cell in system.cells():
            kind = cell.kind
            by_status[(kind, str(cell.status))] += 1
            mailbox = cell.mailbox.depth
            queued[kind] += mailbox
            maximum[kind] = max(maximum[kind], mailbox)
            working[kind] += cell.current is not None
            restarted[kind] += cell.restarts
            crashed[kind] += cell.crashes
        kinds = set(queued) | set(restarted) | set(crashed) | set(system.retired.failures)
        for (kind, status), count in sorted(by_status.items()):
            actors.add_metric((kind, status), count)
        for kind in sorted(kinds):
            depth.add_metric((kind,), queued[kind])
            deepest.add_metric((kind,), maximum[kind])
            busy.add_metric((kind,), working[kind])
            restarts.add_metric((kind,), restarted[kind])
            crashes.add_metric((kind,), crashed[kind])
            failures.add_metric((kind,), system.retired.failures[kind])
        yield from (actors, depth, deepest, busy, restarts, crashes, failures)


class PartsCollector(Collector):
    """What the event bus, runtime driver, egress proxy, webhook worker and store pool count."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def collect(self) -> Iterable[Metric]:
        yield from self._bus()
        yield from self._runtime()
        yield from self._egress()
        yield from self._webhooks()
        yield from self._store()

    def _bus(self) -> Iterator[Metric]:
        bus = self.platform.bus
        backlog = bus.backlog()
        yield CounterMetricFamily("corral_events_published", "Events published on this node's bus.", value=bus.published)
        yield GaugeMetricFamily("corral_event_subscribers", "Live event subscribers (SSE streams, dispatchers).", value=len(backlog))
        yield GaugeMetricFamily(
            "corral_event_fanout_pending", "Events offered to subscribers and not yet taken (fan-out lag), summed.", value=sum(backlog)
        )
        yield GaugeMetricFamily(
            "corral_event_fanout_pending_max", "The most events any one subscriber has not yet taken.", value=max(backlog, default=0)
        )
        yield CounterMetricFamily("corral_event_subscribers_dropped", "Subscribers dropped for lagging a full buffer behind.", value=bus.dropped)

    def _runtime(self) -> Iterator[Metric]:
        driver = self.platform.runtime.started_driver
        launches = CounterMetricFamily("corral_instance_launches", "Instances launched by this node's runtime.")
        failures = CounterMetricFamily(
            "corral_instance_launch_failures", "Launches that failed, by the stage they failed at.", labels=("reason",)
        )
        launches.add_metric((), getattr(driver, "launches", 0))
        failed: Counter[str] = Counter(getattr(driver, "launch_failures", None) or {})
        for reason in ("disk", "network", "cgroups", "zygote", "not_ready", *sorted(set(failed) - LAUNCH_STAGES)):
            failures.add_metric((reason,), failed[reason])
        yield launches
        yield failures

    def _egress(self) -> Iterator[Metric]:
        proxy = self.platform.egress_proxy
        if proxy is None:
            return
        requests = CounterMetricFamily("corral_egress_requests", "Requests through the egress proxy, by decision.", labels=("decision",))
        for decision in ("allowed", "denied", "failed"):
            requests.add_metric((decision,), proxy.decisions[decision])
        yield requests
        yield GaugeMetricFamily("corral_egress_connections", "Open connections from instances to the egress proxy.", value=proxy.connections)

    def _webhooks(self) -> Iterator[Metric]:
        runtime = self.platform.webhooks
        if runtime is None:
            return
        attempts = CounterMetricFamily("corral_webhook_attempts", "Webhook delivery attempts made by this node, by outcome.", labels=("outcome",))
        for outcome in ("delivered", "failed", "error"):
            attempts.add_metric((outcome,), runtime.worker.outcomes[outcome])
        yield attempts

    def _store(self) -> Iterator[Metric]:
        stats = self.platform.db.pool_stats()
        yield GaugeMetricFamily("corral_store_pool_size", "Connections (worker slots) of the store's pool.", value=stats.size)
        yield GaugeMetricFamily("corral_store_pool_in_use", "Pool connections in use now.", value=stats.in_use)
        yield GaugeMetricFamily("corral_store_pool_waiting", "Tasks waiting for a pool connection.", value=stats.waiting)


LAUNCH_STAGES = frozenset({"disk", "network", "cgroups", "zygote", "not_ready"})


class NodeCollector(Collector):
    """The node's capacity and load: cores, memory, the data directory's disk, instances."""

    def __init__(self, platform: Platform, store: StoreFigures) -> None:
        self.platform = platform
        self.store = store

    def collect(self) -> Iterable[Metric]:
        settings = self.platform.settings
        yield GaugeMetricFamily("corral_node_cpu_cores", "CPU cores of this node.", value=os.cpu_count() or 1)
        yield GaugeMetricFamily("corral_node_memory_bytes", "Memory of this node.", value=memory_total_mb() * 1024**2)
        yield GaugeMetricFamily("corral_node_memory_available_bytes", "Memory available on this node.", value=memory_available_mb() * 1024**2)
        disk = data_disk(settings)
        if disk is not None:
            yield GaugeMetricFamily("corral_node_disk_bytes", "Size of the data directory's filesystem.", value=disk[0])
            yield GaugeMetricFamily("corral_node_disk_free_bytes", "Free space of the data directory's filesystem.", value=disk[1])
        yield GaugeMetricFamily(
            "corral_node_disk_reserve_bytes", "Free space below which new instances are refused (CORRAL_DISK_RESERVE_GB).",
            value=settings.disk_reserve_gb * 1024**3,
        )
        pool = self.platform.warm_pool
        yield GaugeMetricFamily("corral_warm_pool_instances", "Booted, unassigned instances in the warm pool.", value=len(pool.pooled_ids()) if pool else 0)
        yield from self.store.node_figures()


class StoreFigures(Collector):
    """Figures read with queries (store) or file reads (cgroups), refreshed by `refresh()`
    before a scrape and kept between: `collect` itself never waits."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self._at = -float("inf")
        self.min_interval = REFRESH_SECONDS
        self._lock = trio.Lock()
        self.instances: dict[tuple[str, str], int] = {}
        self.databases: dict[str, int] = {}
        self.webhooks_pending = 0
        self.webhooks_due = 0
        self.credits_spent = 0
        self.running: list[tuple[str, dict[str, int]]] = []
        self.running_count = 0

    async def refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._at < self.min_interval:
                return
            try:
                await self._read_store()
                await self._read_instances()
            except Exception:  # a scrape must answer with what there is
                log.exception("reading metrics from the store failed")
            self._at = time.monotonic()

    async def _read_store(self) -> None:
        db = self.platform.db
        instances: dict[tuple[str, str], int] = {}
        for kind, table in INSTANCE_TABLES.items():
            for row in await db.fetch_all(f"SELECT status, COUNT(*) AS n FROM {table} GROUP BY status"):
                instances[(kind, str(row["status"]))] = int(row["n"])
        self.instances = instances
        self.databases = {status: count for (kind, status), count in instances.items() if kind == "database"}
        now = utc_now_iso()
        queue = await db.fetch_one(
            "SELECT COUNT(*) AS pending, SUM(CASE WHEN scheduled_at <= ? THEN 1 ELSE 0 END) AS due"
            " FROM webhook_deliveries WHERE status = 'pending'",
            (now,),
        )
        self.webhooks_pending = int(queue["pending"] or 0) if queue else 0
        self.webhooks_due = int(queue["due"] or 0) if queue else 0
        self.credits_spent = int(await db.fetch_value("SELECT COALESCE(SUM(lifetime_spent), 0) FROM credit_accounts") or 0)

    async def _read_instances(self) -> None:
        driver = self.platform.runtime.started_driver
        if driver is None:
            self.running, self.running_count = [], 0
            return
        running = [info.id for info in await driver.instances() if info.address is not None]
        self.running_count = len(running)
        samples = []
        for instance_id in running[:PER_INSTANCE_LIMIT]:
            try:
                samples.append((instance_id, await driver.metrics(instance_id)))
            except Exception:  # gone meanwhile
                continue
        self.running = samples

    def node_figures(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("corral_node_instances_running", "Instances running on this node (warm pool included).", value=self.running_count)

    def collect(self) -> Iterable[Metric]:
        instances = GaugeMetricFamily(
            "corral_instances", "Instance records by kind and status (from the store: the same on every node).", labels=("kind", "status")
        )
        for (kind, status), count in sorted(self.instances.items()):
            instances.add_metric((kind, status), count)
        yield instances
        servers = GaugeMetricFamily("corral_database_servers", "Managed database servers by state (from the store).", labels=("state",))
        for status, count in sorted(self.databases.items()):
            servers.add_metric((status,), count)
        yield servers
        yield GaugeMetricFamily("corral_webhook_queue_pending", "Webhook deliveries waiting (scheduled or retrying).", value=self.webhooks_pending)
        yield GaugeMetricFamily("corral_webhook_queue_due", "Webhook deliveries due now and not yet sent: the backlog.", value=self.webhooks_due)
        yield CounterMetricFamily("corral_credits_spent", "Credits spent by every tenant (from the ledger).", value=self.credits_spent)
        yield from self._per_instance()

    def _per_instance(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily("corral_instance_cpu_seconds", "CPU time of a running instance.", labels=("instance_id",))
        memory = GaugeMetricFamily("corral_instance_memory_bytes", "Memory working set of a running instance.", labels=("instance_id",))
        limit = GaugeMetricFamily("corral_instance_memory_limit_bytes", "Memory limit of a running instance.", labels=("instance_id",))
        pids = GaugeMetricFamily("corral_instance_pids", "Processes of a running instance.", labels=("instance_id",))
        disk = GaugeMetricFamily("corral_instance_disk_bytes", "What a running instance's disk holds on the node.", labels=("instance_id",))
        disk_limit = GaugeMetricFamily("corral_instance_disk_limit_bytes", "The size of a running instance's disk.", labels=("instance_id",))
        for instance_id, usage in self.running:
            cpu.add_metric((instance_id,), usage.get("cpu_ns", 0) / 1e9)
            memory.add_metric((instance_id,), usage.get("memory_working_set_bytes", 0))
            limit.add_metric((instance_id,), usage.get("memory_limit_bytes", 0))
            pids.add_metric((instance_id,), usage.get("pids", 0))
            disk.add_metric((instance_id,), usage.get("disk_bytes", 0))
            disk_limit.add_metric((instance_id,), usage.get("disk_limit_bytes", 0))
        yield from (cpu, memory, limit, pids, disk, disk_limit)
