"""`InstanceActor`: the one base of every actor that owns an instance.

A sandbox, a computer, and later a desktop, a deployment's service, a database
server and a template build are each a row with a status and one instance behind
it. What they share lives here once:

- provisioning in a child task (`Boot` -> `Booted`), so the mailbox keeps answering
  `Get` and `Destroy` while a template builds or an instance boots; `Destroy`
  cancels it, and a boot cut short by a control-plane restart adopts the instance
  it had already made;
- reconciling with the runtime on activation (a running resource whose instance
  stopped under it is started again; one whose instance is gone is an `error`);
- starting, pausing, halting, destroying and connecting to the instance, and
  snapshotting and restoring its files, with runtime errors answered through the
  kind's `Refusals`;
- the sealed environment handed to every boot (`boot_env`);
- the network policy (`SetNetworkPolicy`): stored, put in the instance's chain at
  once, and again whenever the instance comes up.

A kind sets a few class attributes and hooks (see the class docstring) and keeps its
own transition table, which mirrors the specification's state table for it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import trio

from corral.actors.actor import handles
from corral.actors.nodes import lost
from corral.actors.nodes.homes import node_is_live
from corral.actors.record import RecordActor
from corral.actors.runtime import disk_mb, sandbox_disk_gb
from corral.actors.runtime_errors import public_text
from corral.actors.timings import timed
from corral.errors import ApiError
from corral.net import UNRESTRICTED
from corral.storage import sql_identifier, utc_now_iso
from corral.vm import (
    SIZES,
    AgentClient,
    InstanceInfo,
    InstanceNotFound,
    InstanceSpec,
    InstanceState,
    InvalidInstanceState,
    RuntimeDriver,
)

from .messages import Boot, Booted, Connect, Get, Touch
from .network_policy import store as policy_store
from .network_policy.messages import SetNetworkPolicy
from .network_policy.store import NetworkPolicyRecord
from .refusals import Refusals, runtime_refusals

log = logging.getLogger("corral.instances")


@dataclass(frozen=True)
class RunningInstance:
    """A running instance's actor's published view (`ActorSystem.view_of`): its record as
    the actor holds it (activity times may lag the store by the write-behind) and the
    instance's info."""

    record: Any
    info: InstanceInfo


def failure_summary(exc: BaseException) -> str:
    """The first line of what a tenant may read about an error (`public_message`: no
    internal address, no host path), with its type, short enough for the error column;
    the rest goes to the log."""
    text = public_text(exc)
    summary = text.splitlines()[0] if text else "no detail"
    return f"{type(exc).__name__}: {summary}"[:500]


async def _say_hello(agent: AgentClient) -> None:
    """`InstanceActor.warm_agent`'s child, whatever comes of it."""
    with contextlib.suppress(Exception):
        await agent.warm()


class InstanceActor(RecordActor):
    """An actor over one row whose resource runs on one instance.

    Class attributes a kind sets:

    - `booting_state`: the state a new resource is in until `Booted`
      (`creating`, `provisioning`);
    - `refusals`: how the kind words the runtime's "not running" and "gone";
    - `removed_state`: the state of a resource whose row is gone (its `Get` is 404),
      or None when the row stays;
    - `adopt_while_booting`: whether activation adopts a running instance of a
      resource still `booting_state` (True for kinds whose boot has no further steps);
    - `gone_states`: states whose row stays but records no more activity.

    Hooks a kind may override: `instance_id`, `runtime_template`, `disk_gb`, `instance_env`,
    `boot_env`, `make_instance` (how a new instance is made), `on_instance_up` (wait for what the instance runs, e.g. a desktop),
    `after_create` (more provisioning in the boot child, e.g. apps), `running_fields`,
    `on_running` (events and metering once running), `before_halt` (a last word
    with the agent before its instance stops), `on_instance_lost`.
    """

    booting_state: ClassVar[str]
    refusals: ClassVar[Refusals] = Refusals()
    removed_state: ClassVar[str | None] = None
    adopt_while_booting: ClassVar[bool] = False
    #: states whose rows stay but take no more activity (`destroyed`).
    gone_states: ClassVar[tuple[str, ...]] = ()
    error_column = "error"

    info: InstanceInfo | None = None
    _booting: trio.CancelScope | None = None

    # -- what a kind may override ---------------------------------------------------

    @property
    def instance_id(self) -> str:
        """The runtime's name for the instance; the resource's id unless the kind keeps another."""
        return self.id

    @property
    def subject(self) -> dict[str, Any]:
        """What every event about this resource carries: `{"<kind>_id": id}`."""
        return {f"{self.kind}_id": self.id}

    def runtime_template(self) -> str:
        """The runtime template the instance is made from."""
        return str(getattr(self.record, "template_id", None) or "default")

    def disk_gb(self) -> float:
        """GiB of the instance's writable layer (contract §18): a sandbox's by default."""
        return sandbox_disk_gb(self.services.settings)

    def instance_env(self) -> dict[str, str]:
        """Environment the instance keeps for every boot (nothing secret: it is on disk)."""
        return {}

    async def boot_env(self) -> dict[str, str]:
        """Environment for the boot, in memory only (never on the instance's disk)."""
        return {}

    async def on_instance_up(self, info: InstanceInfo) -> None:
        """The instance was created or started: wait here for what it must run before it
        counts as running (raise to fail the boot or the start)."""

    async def after_create(self, info: InstanceInfo) -> str | None:
        """More provisioning in the boot child once the instance runs; a returned text
        is a notice kept in the error column (the resource runs all the same)."""
        return None

    def running_fields(self) -> dict[str, Any]:
        """Fields written with the state when the instance comes up."""
        return {}

    async def on_running(self, booted: bool) -> None:
        """The instance came up: after the first boot (`booted`) or a start."""

    async def before_halt(self) -> None:
        """A last word with the agent before the instance stops or goes."""

    async def on_instance_lost(self) -> None:
        """A running resource whose instance the runtime no longer has became `error`."""

    # -- plumbing -------------------------------------------------------------------

    async def driver(self) -> RuntimeDriver:
        driver: RuntimeDriver = await self.services.runtime.driver()
        return driver

    def spec(self, boot_env: dict[str, str], instance_id: str | None = None) -> InstanceSpec:
        return InstanceSpec(
            instance_id=instance_id or self.instance_id,
            template=self.runtime_template(),
            limits=replace(SIZES[self.record.size], disk_mb=disk_mb(self.disk_gb())),
            env=self.instance_env(),
            hostname=self.record.slug,
            boot_env=boot_env,
        )

    def refused(self) -> contextlib.AbstractContextManager[None]:
        """Runtime errors inside as the kind's API answers."""
        return runtime_refusals(self.refusals)

    def is_removed(self) -> bool:
        return self.removed_state is not None and self.state == self.removed_state

    def transition(self, message: Any) -> str:
        if self.is_removed():  # removed while a request was on its way
            raise self.not_found()
        return super().transition(message)

    def describe(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "address": self.info.address if self.info else None}

    # -- activation -----------------------------------------------------------------

    async def on_activate(self) -> None:
        await super().on_activate()
        await self.refuse_if_homed_elsewhere()
        await self.adopt_move()
        await self.reconcile()

    async def refuse_if_homed_elsewhere(self) -> None:
        """One home per resource (issue 30): the actor of a resource whose row names
        another live node as its home is not activated here (its instance is there;
        here it would find none and mark the resource failed). Requests for it are
        forwarded to that node (`corral.http.forward`); whatever else on this node
        reaches for it (a background job) gets this refusal. A resource of a lost node
        is taken over where it is activated (`take_over_from`)."""
        home = getattr(self.record, "node", None)
        if not home or home == self.services.settings.node_name:
            return
        if await node_is_live(self.db, home):
            raise ApiError(503, "SERVICE_UNAVAILABLE", f"this {self.kind} lives on node {home}; ask that node")
        if not self.is_removed() and self.state not in self.gone_states:
            await self.take_over_from(home)

    async def take_over_from(self, lost_node: str) -> None:
        """The resource's home `lost_node` is lost: make this node its home (one
        compare-and-set: of two nodes, one wins and the other refuses as above), then
        record what the tenant sees, `error` with `NODE_LOST` (contract §20), the way
        every status is written, so a meter stops (`corral.actors.nodes.lost`). A node
        that stopped cleanly is waited for (`lost.RESTART_GRACE_SECONDS`) meanwhile."""
        node = self.services.settings.node_name
        held_here = self.services.runtime.holds(self.instance_id)
        copy_here = await self.has_copy_here()
        recovering = self.recovering_state if copy_here and not held_here else None
        taken = await lost.take_over(
            self.db, table=self.store.table, id_column=self.store.id_column, resource_id=self.id,
            lost_node=lost_node, node=node, kind=self.kind, instance_id=self.instance_id,
            held_here=held_here, copy_here=copy_here,
            recovering={self.state_column: recovering} if recovering is not None else None,
        )
        if taken is None:
            home = await self.store.value(self.db, self.id, "node")
            if home == lost_node:
                raise ApiError(
                    503, "SERVICE_UNAVAILABLE", f"the node that hosts this {self.kind} ({lost_node}) is restarting; try again shortly"
                )
            raise ApiError(503, "SERVICE_UNAVAILABLE", f"this {self.kind} lives on node {home}; ask that node")
        self.record = self.store.replaced(self.record, {"node": node})
        if taken.error is None:
            log.warning("%s %s of node %s, whose instance is here, is this node's now", self.kind, self.id, lost_node)
            return
        if recovering is not None:
            await self.persist(state=recovering)  # what the move wrote, adopted here
        if await self.adopt_move() or await self.recover_here(lost_node):
            return
        await self.persist(state=self.error_state, error=taken.error)
        log.warning("%s %s of lost node %s is this node's now: %s", self.kind, self.id, lost_node, taken.error)
        await self.emit("error", {**self.subject, "error": lost.public_error(taken.error)})
        await self.on_instance_lost()

    async def adopt_move(self) -> bool:
        """A resource moved to this node by a drain: make its instance here from what
        the old home sent (`moving.MovingInstance`); False: nothing was moved here."""
        return False

    recovering_state: str | None = None
    """What a resource taken over from a lost node reads while `recover_here` brings it
    back from the copy this node has (`has_copy_here`); None: the state it had stays."""

    async def has_copy_here(self) -> bool:
        """Whether this node has a copy of the resource that `recover_here` comes back
        from (a draining node takes over only such a resource: the rest is left to a
        node that takes new work)."""
        return False

    async def recover_here(self, lost_node: str) -> bool:
        """The kind's way back from a lost node, on the node that took the resource over
        (a database promotes a replica it has here); False: it reads `NODE_LOST`."""
        return False

    async def reconcile(self) -> None:
        """Bring the record and the runtime into agreement after a (re)activation."""
        booting = self.state == self.booting_state and self.adopt_while_booting
        if self.state != "running" and not booting:
            return
        driver = await self.driver()
        try:
            info = await driver.info(self.instance_id)
        except InstanceNotFound:
            # A resource still booting is booted by its Boot message (sent again at
            # start-up); a running one lost its instance.
            if self.state == "running":
                await self.persist(state=self.error_state, error="the instance is gone")
                await self.on_instance_lost()
            return
        if info.state is InstanceState.STOPPED:
            info = await driver.start(self.instance_id, await self.boot_env())  # the host restarted under it
            await self.apply_network_policy()
            await self.on_instance_up(info)
        self.info = info
        if booting:
            await self.persist(state="running", error=None)

    # -- provisioning ---------------------------------------------------------------

    @handles(Boot)
    async def boot(self, message: Boot) -> None:
        self.transition(message)
        self.spawn(self._provision, message.clone_source, message.snapshot_source)

    async def _provision(self, clone_source: str | None, snapshot_source: str | None = None) -> None:
        with trio.CancelScope() as scope:
            self._booting = scope
            try:
                outcome = await self._make_instance(clone_source, snapshot_source)
            except Exception as exc:  # the outcome is reported, not raised: it is the resource's error
                log.warning("%s %s failed to provision: %s", self.kind, self.id, exc)
                outcome = Booted(None, failure_summary(exc))
            finally:
                self._booting = None
            with contextlib.suppress(ApiError):  # the resource was removed meanwhile
                await self.ref.tell(outcome)

    async def _make_instance(self, clone_source: str | None, snapshot_source: str | None = None) -> Booted:
        with timed(self.services, self.kind, "create"):
            return await self._make_instance_untimed(clone_source, snapshot_source)

    async def _make_instance_untimed(self, clone_source: str | None, snapshot_source: str | None) -> Booted:
        driver = await self.driver()
        env = await self.boot_env()
        try:  # made before a control-plane restart cut the boot short
            info = await driver.info(self.instance_id)
            if info.state is not InstanceState.RUNNING:
                info = await driver.start(self.instance_id, env)
        except InstanceNotFound:
            info = await self.make_instance(driver, env, clone_source, snapshot_source)
        await self.apply_network_policy()
        await self.on_instance_up(info)
        notice = None if clone_source is not None else await self.after_create(info)
        return Booted(info, notice=notice)

    async def make_instance(
        self, driver: RuntimeDriver, env: dict[str, str], clone_source: str | None, snapshot_source: str | None
    ) -> InstanceInfo:
        """Make the new instance: a clone of `clone_source`, a copy of the snapshot, or
        fresh from the template. A kind with another way to make one (a database
        replica) overrides this."""
        if clone_source is not None:
            return await driver.clone(clone_source, self.spec(env))
        await self.template_here(driver)
        if snapshot_source is not None:
            return await driver.create_from_snapshot(snapshot_source, self.spec(env))
        return await driver.create(self.spec(env))

    async def template_here(self, driver: RuntimeDriver) -> None:
        """Before an instance is made from its template on this node: a kind whose
        templates may have been built on another node fetches it (a sandbox's)."""

    @handles(Booted)
    async def booted(self, message: Booted) -> None:
        next_state = self.transition(message)
        if message.info is None:
            await self.persist(state=self.error_state, error=message.error)
            await self.emit("error", {**self.subject, "error": message.error})
            return
        self.info = message.info
        self.warm_agent(message.info)
        await self.persist(state=next_state, error=message.notice, **self.running_fields())
        await self.on_running(booted=True)

    # -- lifecycle helpers for the kinds' handlers ---------------------------------------

    async def start_instance(self) -> None:
        """Start the stopped instance with this boot's environment, or thaw the paused one.

        A thaw resumes every process where it was frozen, in the network as it was (the
        instance's chain stays while it is paused, and a policy set meanwhile went in at
        once): nothing needs its environment, its policy applied again, or waiting for
        (a desktop answered before it could be paused). So a resume costs the thaw and
        the record (issue 28: a desktop's readiness check was 8 of its 9 ms)."""
        thawing = self.info is not None and self.info.state is InstanceState.PAUSED
        with timed(self.services, self.kind, "start"), self.refused():
            driver = await self.driver()
            if thawing:
                with contextlib.suppress(InvalidInstanceState):  # it died while frozen: started anew below
                    self.info = await driver.thaw(self.instance_id)
                    if self.info.state is InstanceState.RUNNING:
                        return
            self.info = await driver.start(self.instance_id, await self.boot_env())
            await self.apply_network_policy()
            await self.on_instance_up(self.info)

    async def pause_instance(self) -> None:
        """Freeze the instance: its processes and memory stay, unscheduled, until `start_instance`."""
        with self.refused():
            self.info = await (await self.driver()).pause(self.instance_id)

    async def halt_instance(self) -> None:
        """Stop every process of the instance; its files stay."""
        await self.before_halt()
        with timed(self.services, self.kind, "stop"), self.refused():
            await (await self.driver()).stop(self.instance_id)
        self.info = None
        await self.services.agents.forget(self.instance_id)

    async def destroy_instance(self) -> None:
        """Cancel a boot under way, then remove the instance and everything it had."""
        if self._booting is not None:
            self._booting.cancel()
        await self.before_halt()
        with self.refused(), contextlib.suppress(InstanceNotFound):
            await (await self.driver()).destroy(self.instance_id)
        self.info = None
        await self.services.agents.forget(self.instance_id)
        if await policy_store.load(self.db, self.id) is not None:
            await policy_store.delete(self.db, self.id)
            await self.services.runtime.forget_network_policy(self.instance_id)

    async def snapshot_instance(self, snapshot_id: str) -> int:
        """Copy the instance's files as the runtime's snapshot `snapshot_id` (frozen for the
        copy while it runs); returns the copy's size in bytes. Safe from a child task."""
        with self.refused():
            return await (await self.driver()).snapshot(self.instance_id, snapshot_id)

    async def restore_instance(self, snapshot_id: str) -> None:
        """Make the stopped instance's files the snapshot's."""
        with self.refused():
            await (await self.driver()).restore(self.instance_id, snapshot_id)

    async def delete_snapshot_files(self, snapshot_id: str) -> None:
        """Remove the runtime's snapshot (nothing to remove is fine)."""
        with self.refused():
            await (await self.driver()).delete_snapshot(snapshot_id)

    def warm_agent(self, info: InstanceInfo) -> None:
        """Open the kept-alive connection to a new agent and have it answer once
        (`/health`), beside the rest of the boot and the answer's way to the caller.

        A new agent's first request costs about 2 ms more than the next (the TCP
        handshake, and the first pass through its request path), which the caller's
        first exec paid after a fork or a create (issue 28: that exec is now 1 to
        1.4 ms faster, the whole no slower). Not after a start: there the request
        competed with the start's own writes and the whole took longer. The connection
        goes back to the node's pool (`AgentPool`) for that exec; a failure here is
        left to the exec to meet and report. (An instance without an agent, a
        database server's, has no agent port.)"""
        if info.state is not InstanceState.RUNNING or not info.address or not info.agent_port:
            return
        self.spawn(_say_hello, self.services.agents.client(info), name=f"warm agent {self.id}")

    def running_agent_info(self) -> InstanceInfo | None:
        """The instance while it runs (for a last word with its agent), else None."""
        if self.info is None or self.info.state is not InstanceState.RUNNING:
            return None
        return self.info

    # -- network policy -------------------------------------------------------------

    async def apply_network_policy(self) -> None:
        """Put the stored policy in the instance's chain (it came up, maybe on a host
        whose network state did not keep it). No stored policy: nothing to do."""
        record = await policy_store.load(self.db, self.id)
        if record is not None:
            await self.services.runtime.apply_network_policy(self.instance_id, record.policy)

    @handles(SetNetworkPolicy)
    async def set_network_policy(self, message: SetNetworkPolicy) -> NetworkPolicyRecord | None:
        """Store the policy, then apply it: at once to a running instance (new
        connections follow it within the nftables transaction), else at its next start."""
        if self.is_removed() or self.state in self.gone_states:
            raise self.not_found()
        policy = message.policy
        record = None
        if policy == UNRESTRICTED:
            await policy_store.delete(self.db, self.id)
        else:
            assert self.tenant_id is not None
            record = NetworkPolicyRecord(
                resource_id=self.id,
                resource_type=self.kind,
                tenant_id=self.tenant_id,
                mode=policy.mode,
                rules=policy.rules_json(),
                updated_at=utc_now_iso(),
            )
            await policy_store.save(self.db, record)
        await self.services.runtime.apply_network_policy(self.instance_id, policy)
        return record

    # -- access ---------------------------------------------------------------------

    def published_view(self) -> RunningInstance | None:
        """While the instance runs: its record and info, what `Connect` would answer now.
        Readers on this node skip the message (and the store) on the way to the agent
        (issue 28: an exec's cost on top of the agent's)."""
        info = self.info
        if info is None or info.state is not InstanceState.RUNNING or self.transitions is None:
            return None
        if not self.transitions.allows(self.state, Connect):
            return None
        return RunningInstance(self.record, info)

    @handles(Connect)
    async def connect(self, message: Connect) -> InstanceInfo:
        self.transition(message)
        if self.info is None or self.info.state is not InstanceState.RUNNING:
            with self.refused():
                self.info = await (await self.driver()).info(self.instance_id)
            refusal = self.refusals.not_running_error()
            if self.info.state is not InstanceState.RUNNING and refusal is not None:
                raise refusal
        return self.info

    @handles(Get)
    async def get(self, message: Get) -> Any:
        """The record (frozen: safe to hand out)."""
        if self.is_removed():
            raise self.not_found()
        return self.record

    # -- activity -------------------------------------------------------------------

    @handles(Touch)
    async def touch(self, message: Touch) -> None:
        if self.is_removed() or self.state in self.gone_states:
            return
        # Behind the request (`Database.later`), and never back in time: a queued touch
        # may land after a newer time written with a state change.
        table, id_column = sql_identifier(self.store.table), sql_identifier(self.store.id_column)
        now = utc_now_iso()
        await self.db.later.add(
            f"UPDATE {table} SET last_activity_at = ? WHERE {id_column} = ?"
            " AND (last_activity_at IS NULL OR last_activity_at < ?)",
            (now, self.id, now),
        )

    async def last_activity(self) -> str | None:
        """`last_activity_at` as stored now: activity is written without changing the record."""
        await self.db.later.flush()
        value = await self.store.value(self.db, self.id, "last_activity_at")
        return None if value is None else str(value)
