"""Metering of running instances (contract §9), and stopping them when credits run out.

A meter row per instance records since when its running time has been charged
(`accrued_until`) and the fraction of a credit accrued but not yet posted
(`carry`). Charging moves `accrued_until` and `carry` in the same transaction as
the `spend` row it posts, under the tenant's account lock, so a crash or restart
never charges a second of running time twice, and nothing is rounded away.

`meter_start` / `meter_stop` are called as an instance enters and leaves running;
a background task started with the platform charges running meters every
`meter_interval` seconds, posts expiries, and stops every running instance of a
tenant whose balance has reached zero (through the stopper each resource kind
registers), and those of an end user past their `max_credit_cents` quota.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

import trio

from corral.actors.nodes.homes import node_is_live
from corral.storage import parse_iso, sql_identifier

from . import ledger, quotas, store
from .ledger import Ledger
from .notices import low_threshold, settle
from .pricing import CREDIT_VALUE_USD_MICROS, accrue, hourly_credits
from .services import BillingServices
from .store import MeterRecord

log = logging.getLogger("corral.billing")


def _charge(ledger_: Ledger, meter: MeterRecord, scale: float) -> None:
    """Post the whole credits `meter` accrued up to the ledger's `now`; keep the rest."""
    if not meter.running or not meter.accrued_until:
        return
    elapsed = ledger_.now - parse_iso(meter.accrued_until)
    micros = (elapsed.days * 86_400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds
    if scale != 1.0:
        micros = int(micros * scale)
    whole, carry = accrue(meter.carry, meter.credits_per_hour, micros)
    if whole:
        ledger_.consume(
            whole,
            "spend",
            f"{meter.resource_type} {meter.size} running time",
            user_id=meter.user_id,
            computer_id=meter.resource_id if meter.resource_type == "computer" else None,
            resource_type=meter.resource_type,
            resource_id=meter.resource_id,
            external_user_id=meter.external_user_id,
            size=meter.size,
            cost_usd_micros=whole * CREDIT_VALUE_USD_MICROS,
        )
    store.advance_meter(ledger_.tx, meter, ledger_.now_iso, carry)


def _scale(platform: BillingServices) -> float:
    return float(platform.settings.meter_rate_scale)


async def meter_start(
    platform: BillingServices,
    *,
    tenant_id: str,
    resource_type: str,
    resource_id: str,
    size: str,
    user_id: str | None = None,
    external_user_id: str | None = None,
) -> None:
    """Start charging `resource_id` from now; a meter already running is left as it is.

    The carried fraction of a credit from its earlier runs is kept."""

    def work(ledger_: Ledger) -> None:
        tx, now = ledger_.tx, ledger_.now_iso
        meter = store.lock_meter(tx, resource_type, resource_id)
        if meter is not None and meter.running:
            return
        started = MeterRecord(
            resource_type=resource_type,
            resource_id=resource_id,
            tenant_id=tenant_id,
            size=size,
            credits_per_hour=hourly_credits(size),
            user_id=user_id,
            external_user_id=external_user_id,
            running=1,
            accrued_until=now,
            carry=0 if meter is None else meter.carry,
            updated_at=now,
        )
        if meter is None:
            store.insert_meter(tx, started)
        else:
            store.restart_meter(tx, started)

    _, outcome = await ledger.in_ledger(platform.db, tenant_id, work, low_threshold=low_threshold(platform))
    metering = platform.metering
    if metering is not None and outcome.balance <= 0:
        metering.wake()  # started with nothing left (e.g. raced with the last credit)


class MeteredInstance(Protocol):
    """What metering needs of an instance record (every inventory table has these)."""

    @property
    def id(self) -> str: ...

    @property
    def tenant_id(self) -> str: ...

    @property
    def size(self) -> str: ...

    @property
    def owner_user_id(self) -> str | None: ...

    @property
    def external_user_id(self) -> str | None: ...


async def meter_instance(platform: BillingServices, resource_type: str, instance: MeteredInstance) -> None:
    """`meter_start` for an instance record."""
    await meter_start(
        platform,
        tenant_id=instance.tenant_id,
        resource_type=resource_type,
        resource_id=instance.id,
        size=instance.size,
        user_id=instance.owner_user_id,
        external_user_id=instance.external_user_id,
    )


async def meter_stop(platform: BillingServices, *, resource_type: str, resource_id: str) -> None:
    """Charge `resource_id` up to now and stop its meter; the carried fraction stays."""
    meter = await store.find_meter(platform.db, resource_type, resource_id)
    if meter is None or not meter.running:
        return
    scale = _scale(platform)

    def work(ledger_: Ledger) -> None:
        current = store.lock_meter(ledger_.tx, resource_type, resource_id)
        if current is None or not current.running:
            return
        _charge(ledger_, current, scale)
        store.stop_meter(ledger_.tx, resource_type, resource_id, ledger_.now_iso)

    _, outcome = await ledger.in_ledger(platform.db, meter.tenant_id, work, low_threshold=low_threshold(platform))
    await settle(platform, outcome)


async def charge_tenant(platform: BillingServices, tenant_id: str) -> ledger.Outcome:
    """Charge every running meter of `tenant_id` up to now, in one transaction."""
    scale = _scale(platform)

    def work(ledger_: Ledger) -> None:
        for meter in store.lock_running_meters(ledger_.tx, tenant_id):
            _charge(ledger_, meter, scale)

    _, outcome = await ledger.in_ledger(platform.db, tenant_id, work, low_threshold=low_threshold(platform))
    await settle(platform, outcome)
    return outcome


async def _lives_elsewhere(platform: BillingServices, resource_type: str, resource_id: str) -> bool:
    """Whether the metered instance lives on another live node, whose own metering stops
    it (every node charges every tenant, but only an instance's node can stop it)."""
    inventory = platform.billing_hooks.inventories().get(resource_type)
    if inventory is None:
        return False
    home = await platform.db.fetch_value(f"SELECT node FROM {sql_identifier(inventory.table)} WHERE id = ?", (resource_id,))
    here = platform.settings.node_name
    return home is not None and home != here and await node_is_live(platform.db, str(home))


async def stop_instances(platform: BillingServices, meters: list[MeterRecord], reason: str) -> int:
    """Stop each metered instance of this node through its kind's stopper; returns how
    many stopped."""
    stopped = 0
    for meter in meters:
        if await _lives_elsewhere(platform, meter.resource_type, meter.resource_id):
            continue
        stopper = platform.billing_hooks.stopper(meter.resource_type)
        if stopper is None:
            log.warning("no stopper registered for %s; %s keeps running", meter.resource_type, meter.resource_id)
            continue
        try:
            await stopper(meter.resource_id)
            stopped += 1
            log.info("stopped %s %s: %s", meter.resource_type, meter.resource_id, reason)
        except Exception:
            log.exception("stopping %s %s (%s) failed", meter.resource_type, meter.resource_id, reason)
            # It keeps its running meter: the next round tries again.
    return stopped


class Metering:
    """The background charging task of one node; `wake()` runs a round at once."""

    def __init__(self, platform: BillingServices) -> None:
        self.platform = platform
        self.interval = float(platform.settings.meter_interval)
        self._wake = trio.Event()
        self.rounds = 0
        self.cancel_scope = trio.CancelScope()
        self._round_lock = trio.Lock()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self.cancel_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.cancel_scope:
            task_status.started()
            while True:
                try:
                    await self.round()
                except Exception:
                    log.exception("a metering round failed")
                with trio.move_on_after(self.interval if math.isfinite(self.interval) else math.inf):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def round(self) -> None:
        """Expire due grants, charge running meters, stop what may no longer run.

        Rounds never overlap on one node (a wake-up during a round waits for it)."""
        async with self._round_lock:
            await self._round()

    async def _round(self) -> None:
        platform = self.platform
        for outcome in await ledger.expire_due(platform.db, low_threshold=low_threshold(platform)):
            await settle(platform, outcome)
        for tenant_id in await store.tenants_with_running_meters(platform.db):
            outcome = await charge_tenant(platform, tenant_id)
            running = await store.running_meters(platform.db, tenant_id)
            if outcome.balance <= 0:
                await stop_instances(platform, running, "credits exhausted")
                continue
            over = await quotas.users_over_credit_cap(platform.db, tenant_id, {m.external_user_id for m in running})
            if over:
                await stop_instances(platform, [m for m in running if m.external_user_id in over], "end-user credit quota reached")
        self.rounds += 1


async def meter_unmetered(platform: BillingServices) -> int:
    """Start meters for running instances that have none (e.g. running since before
    billing existed); they are charged from now. Returns how many."""
    started = 0
    for resource_type, inventory in platform.billing_hooks.inventories().items():
        for instance in await store.unmetered_instances(platform.db, resource_type, inventory.table):
            await meter_instance(platform, resource_type, instance)
            started += 1
    return started


async def start_metering(platform: BillingServices) -> Metering:
    """Start the node's metering task in the platform's nursery (from `corral.node`)."""
    if await meter_unmetered(platform):
        log.info("started meters for running instances that had none")
    metering = Metering(platform)
    platform.metering = metering
    await platform.nursery.start(metering.run)
    return metering


def stop_metering(platform: BillingServices) -> None:
    """Cancel the metering task (before the actor system shuts down)."""
    metering, platform.metering = platform.metering, None
    if metering is not None:
        metering.stop()
