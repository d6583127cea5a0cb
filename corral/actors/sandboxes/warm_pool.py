"""The warm pool: booted, unassigned sandbox instances, so that a create answers `running` at once.

A create asks the pool for an instance of its template and size. When there is one,
the sandbox is made with that instance's id (a fresh UUID the pool drew and nobody has
seen), and its actor adopts the running instance the way it adopts one that a restart
cut off mid-boot: network policy, then `running`. What differs between sandboxes is
applied at that point or after it, never baked into the pooled instance: the sealed
env goes with every exec, the network policy is put in the instance's chain when the
actor adopts it, the limits are those of the size the instance was pooled for, and
the identity (id, hostname `sbx-<id>`) is the instance's own. A pooled instance is
made fresh from a built-in template and handed out once; nothing of any tenant is
ever in it, and a tenant's own templates (their layers are the tenant's files) are
never pooled.

The pool is the node's, not a tenant's resource, so it is a plain service rather than
an actor: `run` keeps each wanted (template, size) at `CORRAL_WARM_POOL` instances,
booting at most `PARALLEL_BOOTS` at a time in the background, and boots none while
the node's available memory is under `CORRAL_MEMORY_RESERVE_MB`. A (template, size)
is wanted from the first create that asks for it (the default template's `small`
from the start). `pool.json` in the data directory lists the pooled ids, so that a
node that died with a pool destroys it at its next start; a clean stop destroys it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from corral.actors.agents import AgentPool
from corral.actors.runtime import (
    RuntimeHolder,
    disk_mb,
    memory_available_mb,
    memory_total_mb,
    sandbox_disk_gb,
)
from corral.config import Settings
from corral.ids import new_uuid
from corral.storage import Database
from corral.vm import SIZES, InstanceNotFound, InstanceSpec

log = logging.getLogger("corral.sandboxes.pool")

PARALLEL_BOOTS = 2
REFILL_DELAY = 0.25
"""Seconds between a take and its replacement's boot: a boot's work (netlink, cgroups,
the disk) competes with the create that took the instance, which would then answer later."""
RETRY_AFTER_FAILURE = 5.0
MANIFEST = "pool.json"

Key = tuple[str, str]
"""(template, size)"""


def sandbox_hostname(sandbox_id: str) -> str:
    """A sandbox's hostname: its id's, so that a pooled instance needs no other."""
    return f"sbx-{sandbox_id[:8]}"


def sandbox_spec(settings: Settings, instance_id: str, template: str, size: str, boot_env: dict[str, str] | None = None) -> InstanceSpec:
    """The instance of a sandbox, fresh or pooled alike."""
    return InstanceSpec(
        instance_id=instance_id,
        template=template,
        limits=replace(SIZES[size], disk_mb=disk_mb(sandbox_disk_gb(settings))),
        hostname=sandbox_hostname(instance_id),
        boot_env=boot_env or {},
    )


def memory_reserve_mb(settings: Settings) -> int:
    if settings.memory_reserve_mb is not None:
        return settings.memory_reserve_mb
    return max(512, memory_total_mb() // 10)


@dataclass
class PoolStats:
    ready: int
    booting: int
    taken: int
    boot_failures: int


class WarmPool:
    def __init__(
        self,
        settings: Settings,
        runtime: RuntimeHolder,
        agents: AgentPool,
        *,
        available_mb: Callable[[], int] = memory_available_mb,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.agents = agents
        self.size = settings.warm_pool
        self.reserve_mb = memory_reserve_mb(settings)
        self._available_mb = available_mb
        self._ready: dict[Key, list[str]] = {}
        self._booting: dict[Key, int] = {}
        self._boot_ids: set[str] = set()
        self._wanted: list[Key] = [("default", "small")]
        self._changed = trio.Event()
        self._manifest = Path(settings.data_dir) / MANIFEST
        self.taken = 0
        self.boot_failures = 0
        self.running = False
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()

    # -- what creates use ---------------------------------------------------------------

    def poolable(self, template: str, size: str) -> bool:
        """A built-in template (a tenant's layered one never is) and a known size."""
        templates = self.runtime.templates
        return self.size > 0 and size in SIZES and templates.exists(template) and not templates.is_layered(template)

    def take(self, template: str, size: str) -> str | None:
        """A ready instance's id, now the caller's (it must become a sandbox of that id),
        or None; either way the pool refills."""
        if not self.running or not self.poolable(template, size):
            return None
        key = (template, size)
        if key not in self._wanted:
            self._wanted.append(key)
        ready = self._ready.get(key)
        taken = ready.pop(0) if ready else None
        if taken is not None:
            self.taken += 1
            self._write_manifest()
        self._changed.set()
        return taken

    def give_back(self, template: str, size: str, instance_id: str) -> None:
        """An instance `take` handed out whose sandbox could not be made (a refusal before
        anything ran in it): ready again."""
        self.taken -= 1
        self._ready.setdefault((template, size), []).insert(0, instance_id)
        self._write_manifest()

    def stats(self, template: str = "default", size: str = "small") -> PoolStats:
        key = (template, size)
        return PoolStats(len(self._ready.get(key, [])), self._booting.get(key, 0), self.taken, self.boot_failures)

    def pooled_ids(self) -> list[str]:
        """Ready instances' ids."""
        return [instance_id for ids in self._ready.values() for instance_id in ids]

    # -- the background work ------------------------------------------------------------

    async def run(self, db: Database, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Destroy what a dead node left pooled, then keep the pool full until cancelled;
        then destroy what is pooled."""
        await self._destroy_leftovers(db)
        self.running = True
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                limiter = trio.CapacityLimiter(PARALLEL_BOOTS)
                while True:
                    self._changed = trio.Event()
                    for key in self._missing():
                        self._booting[key] = self._booting.get(key, 0) + 1
                        nursery.start_soon(self._boot_one, key, limiter)
                    with trio.move_on_after(RETRY_AFTER_FAILURE):
                        await self._changed.wait()
                    await trio.sleep(REFILL_DELAY)
        finally:
            self.running = False
            with trio.CancelScope(shield=True):
                await self._empty()
            self._stopped.set()

    async def stop(self) -> None:
        """Stop refilling and destroy what is pooled (before the runtime closes)."""
        if self._scope is None:
            return
        self._scope.cancel()
        await self._stopped.wait()

    def _missing(self) -> list[Key]:
        """One boot for each wanted key short of the pool's size, while memory allows."""
        if self._available_mb() < self.reserve_mb:
            return []
        missing = []
        for key in self._wanted:
            if not self.runtime.templates.is_built(key[0]):
                continue  # built in the background at start; the first create waits for it
            if len(self._ready.get(key, [])) + self._booting.get(key, 0) < self.size:
                missing.append(key)
        return missing

    async def _boot_one(self, key: Key, limiter: trio.CapacityLimiter) -> None:
        instance_id = new_uuid()
        created = False
        try:
            async with limiter:
                if self._available_mb() < self.reserve_mb:
                    return
                self._boot_ids.add(instance_id)
                self._write_manifest()  # listed before it exists: a crash leaves no stray
                driver = await self.runtime.driver()
                info = await driver.create(sandbox_spec(self.settings, instance_id, *key))
                created = True
                # A first exec opens the kept-alive connection the sandbox's first exec
                # then reuses, and runs the agent's exec path once (it holds nothing).
                await self.agents.client(info).exec("true")
            self._ready.setdefault(key, []).append(instance_id)
        except Exception as exc:
            self.boot_failures += 1
            log.warning("could not boot a pooled %s/%s instance: %s", key[0], key[1], exc)
            if created:
                with trio.CancelScope(shield=True):
                    await self._destroy([instance_id])
            await trio.sleep(RETRY_AFTER_FAILURE)
        except BaseException:  # cancelled: the node stops
            if created:
                with trio.CancelScope(shield=True):
                    await self._destroy([instance_id])
            raise
        finally:
            self._booting[key] -= 1
            self._boot_ids.discard(instance_id)
            self._write_manifest()
            self._changed.set()

    async def _empty(self) -> None:
        """Destroy every pooled instance (the node stops)."""
        ids = self.pooled_ids()
        self._ready.clear()
        await self._destroy(ids)
        self._write_manifest()

    async def _destroy_leftovers(self, db: Database) -> None:
        """Instances a node that did not stop cleanly left in its pool: those that no
        sandbox took (a taken one has a row of its id) are destroyed."""
        try:
            listed = json.loads(self._manifest.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(listed, list):
            return
        leftovers = []
        for instance_id in listed:
            if isinstance(instance_id, str) and await db.fetch_one("SELECT id FROM sandboxes WHERE id = ?", (instance_id,)) is None:
                leftovers.append(instance_id)
        await self._destroy(leftovers)
        self._write_manifest()

    async def _destroy(self, ids: list[str]) -> None:
        if not ids:
            return
        driver = await self.runtime.driver()
        for instance_id in ids:
            try:
                with contextlib.suppress(InstanceNotFound):
                    await driver.destroy(instance_id)
            except Exception as exc:
                log.warning("could not destroy pooled instance %s: %s", instance_id, exc)

    def _write_manifest(self) -> None:
        ids = self.pooled_ids() + sorted(self._boot_ids)
        with contextlib.suppress(OSError):
            if ids or self._manifest.exists():
                temporary = self._manifest.with_suffix(".tmp")
                temporary.write_text(json.dumps(ids))
                temporary.replace(self._manifest)
