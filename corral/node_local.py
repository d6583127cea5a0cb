"""What one node keeps to itself, in one object (issue 30: "gather what stays node-local").

Several nodes share one PostgreSQL store, and through it everything a tenant or an
operator can name: rows, events, leases, rate-limit counts, idempotency keys, quotas.
What is left is this: what lives in one node's process and nowhere else. It falls
in three groups, and each field below says which, and how it is kept in step with
the other nodes where that matters:

- **This node's own work**, which no other node can do: its instances (`runtime`,
  `agents`, `warm_pool`, `databases`), its actors (`system`: each resource's actor
  lives on its home only), its egress proxy, its background tasks (`nursery`,
  `metering`, `webhooks`, the leases it holds). Another node reaches this work only
  by forwarding a request here (`corral.http.forward`), never through these objects.
- **Copies of shared state**, kept for speed and never the truth: the preview
  router's tables, the custom domains and deployment hosts the router and the TLS
  edge read, the template and profile resolvers. Each is re-read on a notice or an
  event from whichever node changed the row (`corral.storage.notices`, the event
  bus), and read whole again after a missed notice.
- **What watches this node**: its metrics, request observers and timings, which
  describe this process only (an operator scrapes each node).

`Platform` (`corral.node`) is the node's one services object: the shared half is its
own fields (settings, store, event log, secrets), and this object is its `local`.
Its node-local attributes are reached through `platform.<name>` as before (each is
an `OnThisNode` descriptor reading `platform.local.<name>`), so the parts' narrow
`Protocol`s are unchanged; what lives here is named once, in this file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

import trio

from corral.actors import agent_runs, deployments, domains, sandboxes
from corral.actors.agents import AgentPool
from corral.actors.billing import MeteringHandle
from corral.actors.billing.hooks import BillingHooks
from corral.actors.bus import EventBus
from corral.actors.computers.activity import Activity
from corral.actors.computers.services import MetricsSampling, ProfileResolver
from corral.actors.databases import DatabaseNode
from corral.actors.nodes.leases import Leases
from corral.actors.previews import AccessCache
from corral.actors.previews.router import PreviewRouter
from corral.actors.runtime import RuntimeHolder
from corral.actors.sandboxes.services import TemplateResolver
from corral.actors.system import ActorSystem
from corral.actors.timings import OperationTimings
from corral.actors.webhooks.runner import WebhookRuntime
from corral.net.egress import EgressProxy
from corral.net.preview import RouteTable
from corral.operations import NodeMetrics
from corral.request_observers import RequestObservers
from corral.storage import BlobStore, Notices, SharedRateCounts

T = TypeVar("T")


@dataclass
class NodeLocal:
    """Everything this node keeps in its own process (see the module docstring)."""

    # -- this node's own work -----------------------------------------------------------
    nursery: trio.Nursery
    """The node's background tasks; cancelled when it stops."""
    runtime: RuntimeHolder
    """This node's instances (namespaces, processes, files): no other node reaches them."""
    agents: AgentPool
    """Kept-alive connections to the guest agents of this node's instances."""
    bus: EventBus
    """Subscribers of this node (SSE streams, waiters); every node's events reach it
    (`RemoteEvents`), and the event log in the store is the truth."""
    blobs: BlobStore
    """This node's blob files; a blob another node wrote is fetched from it on first
    read (`ClusterBlobs`), and one written here is copied to a second node."""
    notices: Notices
    """This node's end of the "read it again" notices (its LISTEN connection)."""
    egress_proxy: EgressProxy | None = None
    """This node's egress proxy, on its bridge (None: `CORRAL_EGRESS_PROXY=0`)."""
    system: ActorSystem = field(init=False)
    """The actors that live here: each resource's only on its home node."""
    databases: DatabaseNode = field(init=False)
    """This node's database servers, their connection proxy and access rules."""
    warm_pool: sandboxes.WarmPool | None = None
    """Booted, unassigned sandbox instances of this node (`CORRAL_WARM_POOL`; None: no pool)."""
    leases: Leases = field(init=False)
    """The cluster-wide leases this node holds now (`corral.actors.nodes.leases`)."""
    metering: MeteringHandle | None = None
    """The running metering task (None before the node started billing, and after it stopped)."""
    billing_hooks: BillingHooks = field(default_factory=BillingHooks)
    """How each instance kind is stopped and counted on this node (registered at start)."""
    computer_activity: Activity | None = None
    """Computer commands in flight on this node (the idle watcher skips busy computers)."""
    computer_metrics: MetricsSampling | None = None
    """Sampling of this node's computers' CPU and memory."""
    webhooks: WebhookRuntime | None = None
    """This node's webhook sender and delivery worker (deliveries are leased from the store)."""
    preview_polls: set[str] = field(default_factory=set)
    """Previews whose port this node polls for `sandbox.preview.ready`."""
    rate_counts: SharedRateCounts | None = None
    """This node's rate-limit counts not yet added to the store's (None on SQLite, whose
    one node counts alone)."""

    # -- copies of shared state ---------------------------------------------------------
    preview_access: AccessCache | None = None
    """Routing and token caches of the preview router and the API (re-read on a notice)."""
    preview_router: PreviewRouter | None = None
    """This node's preview router and its route table."""
    preview_route_plugins: list[Callable[[RouteTable], None]] = field(default_factory=list)
    """Parts that add hosts to the preview router's table when it is built."""
    custom_domains: domains.DomainMap = field(default_factory=domains.DomainMap)
    """Custom domains in memory, what the router and the TLS edge read (kept by their events)."""
    deployment_sites: deployments.DeploymentSites | None = None
    """The router's table of deployment hosts (re-read on a notice)."""
    edge_hosts: domains.EdgeHosts | None = None
    """What `GET /tls/ask` answers from."""
    edge_secret: str = ""
    """Shared with this node's `corral edge`: the header that proves a request came through it."""
    sandbox_templates: TemplateResolver | None = None
    """Tenants' sandbox templates as this node resolves them; None: built-ins only."""
    agent_runtime_profiles: ProfileResolver | None = None
    """Registered by the agent-runs part; None: tenants have no profiles."""
    run_profiles: agent_runs.RunProfiles | None = None
    """Runtime profiles as agent runs resolve them (the profiles part's); None: no profiles."""

    # -- what watches this node ---------------------------------------------------------
    request_observers: RequestObservers = field(default_factory=RequestObservers)
    """Called with each API request's record once answered, in batches (metrics, the
    access log, the operator views)."""
    operation_timings: OperationTimings = field(default_factory=OperationTimings)
    """Observers of instance operations' durations (`corral.actors.timings`): the metrics."""
    metrics: NodeMetrics | None = None
    """This node's Prometheus registry and hooks (None: `CORRAL_METRICS_PORT` unset)."""


class OnThisNode(Generic[T]):
    """An attribute of the node's services object that lives in its `local` part."""

    name: str

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> OnThisNode[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> Any:
        if instance is None:
            return self
        return getattr(instance.local, self.name)  # type: ignore[attr-defined]

    def __set__(self, instance: object, value: T) -> None:
        setattr(instance.local, self.name, value)  # type: ignore[attr-defined]
