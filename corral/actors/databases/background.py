"""The databases part's background work on one node.

- `start_background`: the proxy starts (with `ProxyHooks`), the template cluster is
  prepared when the node has databases (else at the first create), copies of it are
  kept ready for creates from the first create on, every live database gets its listener again, unfinished creations boot
  again, backups and restores a restart cut short are marked failed.
- `watch`: every `database_check_seconds`, a running database whose server is gone
  is reported to its actor (which restarts it with backoff); an idle one past its
  `auto_suspend_seconds` is suspended; cgroup samples are taken for metrics; the
  nftables pairs (the tenant's running instances x its databases' ports) are renewed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import TYPE_CHECKING

import trio

from corral.actors.errors import ActorStopped, MailboxFull
from corral.actors.periodic import run_periodically
from corral.errors import ApiError
from corral.net import NetworkError
from corral.net.pgproxy.access import RENEW_SECONDS
from corral.storage import utc_now_iso
from corral.vm import InstanceNotFound, InstanceState

from . import store
from .actor import DatabaseActor
from .hooks import ProxyHooks
from .logs import trim_logs_forever
from .messages import Boot, ServerExited, Suspend
from .service import listen

if TYPE_CHECKING:
    from .services import DatabaseServices

log = logging.getLogger("corral.databases")

SAMPLE_SECONDS = 5.0
ACCESS_REFRESH_SECONDS = 15.0
RELAY_SECONDS = 1.0


async def start_background(platform: DatabaseServices) -> None:
    node = platform.databases
    node.proxy.hooks = ProxyHooks(platform)
    await platform.nursery.start(node.proxy.run)
    await node.access.reset()  # an earlier run's fast paths go; this node's running servers open theirs below
    await platform.nursery.start(run_periodically, node.access.renew, lambda: RENEW_SECONDS, "renewing databases' fast paths")
    platform.nursery.start_soon(node.driver.keep_ready)  # copies of the template ready for creates
    await platform.nursery.start(trim_logs_forever, node.driver)
    rows = await store.live(platform.db)
    if rows:  # a node without databases makes no template (test servers start by the hundred)
        platform.nursery.start_soon(_prepare_template, platform)
    here = platform.settings.node_name
    for backup in await store.unfinished_backups(platform.db, here):
        await store.finish_backup(platform.db, backup.id, size=None, sha256=None, error="interrupted by a restart of the control plane")
    for restore in await store.unfinished_restores(platform.db, here):
        await store.finish_restore(platform.db, restore.id, "interrupted by a restart of the control plane")
    for row in rows:
        if row.node not in (None, here):
            continue  # another node's (issue 30): re-adopted there; this node may not activate its actor
        with contextlib.suppress(Exception):
            await listen(platform, row)
        node.proxy.mark_active(row.id)
        if row.status == "running":  # servers that outlived the last run keep their fast path
            with contextlib.suppress(Exception):
                await node.access.open_fast_path(
                    row.id, node.listen_hosts(True), row.port, node.server_port(row.port)
                )
        ref = await platform.system.get(DatabaseActor, row.id)
        if row.status == "creating":
            await ref.tell(Boot(clone_source=row.parent_id))
    await platform.nursery.start(watch, platform)
    await platform.nursery.start(follow_instances, platform)
    if platform.db.dialect == "postgresql":  # databases of other nodes, at this node's `internal_url` host
        await platform.nursery.start(
            run_periodically, functools.partial(relay_round, platform), lambda: RELAY_SECONDS, "relaying other nodes' databases",
        )


async def relay_round(platform: DatabaseServices) -> None:
    """This node's instances reach every database of their tenant at `internal_url`, whose
    host (`corral.net.HOST_NAME`) each node answers with its own bridge address: the
    proxy listens there for each database another node runs, on its port (ports are the
    cluster's), and passes each connection to that node's proxy (`ProxyHooks.elsewhere`),
    which admits, wakes and serves it. Which instances may connect is the same pair set
    as for this node's own databases (`allowed_pairs`). Kept up to date every
    `RELAY_SECONDS`: a database made, moved, promoted or deleted elsewhere."""
    here = platform.settings.node_name
    node = platform.databases
    wanted = {row.id: row.port for row in await store.live(platform.db) if row.node not in (None, here)}
    relayed = node.proxy.relayed()
    for database_id, (port, _) in relayed.items():
        if wanted.get(database_id) != port:
            node.proxy.close(database_id)
    missing = {database_id: port for database_id, port in wanted.items() if database_id not in relayed or relayed[database_id][0] != port}
    if not missing or not platform.runtime.has_instances():
        return  # no instance here to reach them (the bridge is made with the first)
    await platform.runtime.driver()  # the bridge: its address is the one to listen at
    for database_id, port in missing.items():
        if node.proxy.listening(database_id) is None:  # not this node's own meanwhile (moved here)
            await node.proxy.listen(database_id, port, (node.internal_host,), relay=True)


INSTANCE_EVENTS = ("sandbox.ready", "sandbox.started", "computer.running", "computer.started")


async def follow_instances(platform: DatabaseServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """An instance that comes up may reach its tenant's databases at once, not at the
    next refresh: the pairs are renewed on each of these events."""
    with platform.bus.subscribe(types=INSTANCE_EVENTS) as events:
        task_status.started()
        async for _event in events:
            try:
                await update_access(platform)
                if platform.db.dialect == "postgresql":
                    await relay_round(platform)
            except Exception:
                log.exception("database access update failed")


async def _prepare_template(platform: DatabaseServices) -> None:
    try:
        await platform.databases.driver.prepare_template()
    except Exception as exc:  # creation prepares it again and reports the error then
        log.error("the database template cluster could not be prepared: %s", exc)


async def watch(platform: DatabaseServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    last_sample = 0.0
    last_access = 0.0
    while True:
        await trio.sleep(platform.settings.database_check_seconds)
        try:
            now = time.monotonic()
            sample = now - last_sample >= SAMPLE_SECONDS
            refresh = now - last_access >= ACCESS_REFRESH_SECONDS
            await check_once(platform, sample=sample)
            await update_access(platform, force=refresh)
            if sample:
                last_sample = now
            if refresh:
                last_access = now
        except Exception:  # a bad round must not end the watcher
            log.exception("database watch round failed")


async def _tell(platform: DatabaseServices, database_id: str, message: object) -> None:
    with contextlib.suppress(ApiError, ActorStopped, MailboxFull):
        ref = await platform.system.get(DatabaseActor, database_id)
        await ref.tell(message)


async def check_once(platform: DatabaseServices, *, sample: bool = False) -> None:
    node = platform.databases
    for row in await store.in_states(platform.db, "running"):
        try:
            info = await node.driver.info(row.id)
        except InstanceNotFound:
            continue
        if info.state is not InstanceState.RUNNING:
            await _tell(platform, row.id, ServerExited())
            continue
        if (
            row.auto_suspend_seconds > 0
            and node.proxy.open_connections(row.id) == 0
            and node.proxy.idle_seconds(row.id) >= row.auto_suspend_seconds
        ):
            # Clients on the fast path are the server's alone to count.
            if await node.driver.client_connections(row.id):
                node.proxy.mark_active(row.id)
            else:
                await _tell(platform, row.id, Suspend())
        if sample:
            await _sample(platform, row.id, row.size, info.limits.vcpus)


_cpu_last: dict[str, tuple[float, int]] = {}


async def _sample(platform: DatabaseServices, database_id: str, size: str, vcpus: float) -> None:
    usage = await platform.databases.driver.metrics(database_id)
    if not usage:
        return
    now = time.monotonic()
    cpu_ns = int(usage.get("cpu_ns", 0))
    previous = _cpu_last.get(database_id)
    _cpu_last[database_id] = (now, cpu_ns)
    cpu = None
    if previous is not None:  # CPU is a rate: it needs two readings
        cpu = round(100.0 * (cpu_ns - previous[1]) / 1e9 / max(now - previous[0], 1e-6) / max(vcpus, 1.0), 2)
    limit = int(usage.get("memory_limit_bytes") or 0)
    memory = 100.0 * int(usage.get("memory_working_set_bytes", 0)) / limit if limit else 0.0
    platform.databases.record_sample(database_id, {"ts": utc_now_iso(), "cpu": cpu, "memory": round(memory, 2)})


async def allowed_pairs(platform: DatabaseServices) -> set[tuple[str, int]]:
    """(instance address, database port) for every running instance of each tenant
    that has databases (other tenants' instances are in no pair with the port)."""
    ports: dict[str, list[int]] = {}
    for row in await store.live(platform.db):
        # the proxy's port, and the server's own where the fast path leads
        ports.setdefault(row.tenant_id, []).extend((row.port, platform.databases.server_port(row.port)))
    if not ports:
        return set()
    owners: dict[str, str] = {}
    for item in await platform.db.fetch_all("SELECT id, tenant_id FROM sandboxes WHERE status != 'destroyed'"):
        owners[str(item["id"])] = str(item["tenant_id"])
    for item in await platform.db.fetch_all("SELECT instance_id, tenant_id FROM computers"):
        owners[str(item["instance_id"])] = str(item["tenant_id"])
    driver = await platform.runtime.driver()
    pairs: set[tuple[str, int]] = set()
    for info in await driver.instances():
        tenant = owners.get(info.id)
        if tenant is None or info.address is None or info.state is InstanceState.STOPPED:
            continue
        for port in ports.get(tenant, []):
            pairs.add((info.address, port))
    return pairs


async def update_access(platform: DatabaseServices, *, force: bool = False) -> None:
    if not await store.live(platform.db) and platform.databases.access.applied is None:
        return
    try:
        await platform.databases.access.apply(await allowed_pairs(platform), force=force)
    except NetworkError as exc:
        log.warning("database access rules not applied: %s", exc)
