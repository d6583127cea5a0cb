"""The deployment service (`svc_`): a kind of instance actor (`corral.actors.instances`).

A service is an instance of the default template whose `/workspace` is the
version's artifact, running the version's `run_command` there as a background
process of its guest agent. It counts as up once `health_check_path` answers on
`port` (2xx or 3xx, asked from inside the instance) within 60 s; otherwise the boot
fails and the version with it (`HEALTH_CHECK_FAILED`).

While it runs, a child task watches the process; when it exits the actor starts
it again after a backoff (1, 2, 4 ... 30 s, reset after 60 s up), counting
`restarts`. States: starting -> running | error; running -> stopped (credits ran
out) -> running (its version promoted again); any -> destroyed.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.instances import InstanceActor
from corral.actors.runtime_errors import PublicError, public_message, public_text
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.ids import prefixed
from corral.vm import AgentClient, InstanceInfo

from . import service_billing, service_store
from . import store as deployment_store
from .messages import Boot, Booted, Connect, Halt, Logs, Restart, StartService, StopService
from .service_store import SERVICES, ServiceRecord

log = logging.getLogger("corral.deployments.services")

HEALTH_TIMEOUT = 60.0
WATCH_SECONDS = 1.0
BACKOFF_MAX = 30.0
STABLE_SECONDS = 60.0
ARTIFACT_PATH = "/tmp/.corral-artifact.tar"
INSTALLED_MARK = "/var/lib/corral-artifact"


class HealthCheckFailed(PublicError):
    """The service did not answer its health check (its own words and log lines)."""


class DeploymentServiceActor(InstanceActor):
    kind = "deployment_service"
    store = SERVICES
    record: ServiceRecord
    booting_state = "starting"
    gone_states = ("destroyed",)
    transitions = TransitionTable(
        {
            ("starting", Boot): "starting",
            ("starting", Booted): "running",
            ("running", Restart): "running",
            ("running", Connect): "running",
            ("running", Halt): "stopped",
            ("stopped", StartService): "running",
            ("*", StopService): "destroyed",
        },
        refusals={
            Connect: ("SERVICE_UNAVAILABLE", "the deployment service is not running"),
            Halt: ("INVALID_STATE", "the deployment service is not running"),
            StartService: ("INVALID_STATE", "the deployment service is not stopped"),
        },
    )

    _started_at: float = 0.0

    def not_found(self) -> ApiError:
        return ApiError(404, "NOT_FOUND", "deployment service not found")

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        await super().save(state, fields)
        await service_billing.follow_status(self.services, self.record)  # metered while running

    async def on_failed(self, error: BaseException) -> None:
        await super().on_failed(error)
        await service_billing.meter_off(self.services, self.id)

    async def create_record(self, draft: ServiceRecord) -> ServiceRecord:
        await self.db.transaction(lambda tx: service_store.insert(tx, draft))
        self.tenant_id = draft.tenant_id
        return draft

    def runtime_template(self) -> str:
        return self.record.template_id

    @property
    def subject(self) -> dict[str, Any]:
        return {"service_id": self.id, "deployment_id": self.record.deployment_id, "version_id": self.record.version_id}

    # -- the instance comes up: install, run, health-check --------------------------------

    async def on_instance_up(self, info: InstanceInfo) -> None:
        agent: AgentClient = self.services.agents.client(info)
        await agent.wait_ready(30)
        installed = await agent.exec(f"test -e {INSTALLED_MARK}", timeout=10)
        if installed.exit_code != 0:
            await self._install(agent)
        process_id = await self._run(agent)
        await self._wait_healthy(agent, process_id)
        await self.store.update(self.db, self.id, {"process_id": process_id})
        self.record = self.store.replaced(self.record, {"process_id": process_id})

    async def _install(self, agent: AgentClient) -> None:
        tar = await self.services.blobs.verified_path(self.record.artifact_sha256)
        data = await trio.to_thread.run_sync(tar.read_bytes)
        await agent.write_file(ARTIFACT_PATH, data)
        script = f"mkdir -p /workspace && tar -xf {ARTIFACT_PATH} -C /workspace && rm -f {ARTIFACT_PATH} && touch {INSTALLED_MARK}"
        result = await agent.exec(script, timeout=120)
        if result.exit_code != 0:
            raise RuntimeError(f"the artifact could not be unpacked: {result.stderr[-500:]}")

    async def _run(self, agent: AgentClient) -> str:
        process_id = prefixed("proc")
        env = {"PORT": str(self.record.port)}
        await agent.spawn(self.record.run_command, cwd="/workspace", env=env, name="service", process_id=process_id)
        self._started_at = time.monotonic()
        return process_id

    async def _wait_healthy(self, agent: AgentClient, process_id: str) -> None:
        url = f"http://127.0.0.1:{self.record.port}{self.record.health_check_path}"
        probe = f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 2 {shlex.quote(url)}"
        deadline = trio.current_time() + HEALTH_TIMEOUT
        last = "no answer"
        while trio.current_time() < deadline:
            result = await agent.exec(probe, timeout=10)
            code = result.stdout.strip()
            if code.isdigit() and 200 <= int(code) < 400:
                return
            last = f"HTTP {code}" if code.isdigit() and code != "000" else "no answer"
            process = await agent.process(process_id)
            if process.get("status") != "running":
                tail = await agent.logs(process_id, tail=20)
                lines = "\n".join(str(line.get("line", "")) for line in tail.get("lines", []))
                raise HealthCheckFailed(f"run_command exited with {process.get('exit_code')} before answering: {lines[-1500:]}")
            await trio.sleep(0.5)
        raise HealthCheckFailed(f"{url} did not answer within {int(HEALTH_TIMEOUT)} s ({last})")

    async def on_running(self, booted: bool) -> None:
        self.spawn(self._watch)
        if booted:  # a task: the reload asks this actor (`Connect`)
            self.spawn(self._route_here)

    async def _route_here(self) -> None:
        """Every node's router reaches the service where it runs now (a service booted
        again after its node was lost is routed here at once, not at the next reload)."""
        sites = getattr(self.services, "deployment_sites", None)
        if sites is None:
            return
        try:
            await sites.reload(self.record.deployment_id)
        except Exception as exc:  # the routers read it again at their next reload
            log.warning("service %s: its deployment's routes were not reloaded: %s", self.id, exc)

    async def recover_here(self, lost_node: str) -> bool:
        """A service keeps nothing of its own on its node (it runs its version's artifact),
        so the node that took it over from `lost_node` boots it again here: same id and
        row, `starting` until healthy (then routed here on every node), or failed."""
        if self.state not in ("starting", "running"):
            return False
        deployment = await deployment_store.load(self.db, self.record.deployment_id)
        if deployment is None or deployment.state == "deleted":
            return False  # reads NODE_LOST, and is stopped with its deployment's other services
        await self.persist(state="starting", process_id=None, error=None)
        self.spawn(self._provision, None, None)
        log.warning("service %s of lost node %s boots again on this node", self.id, lost_node)
        return True

    async def on_activate(self) -> None:
        await super().on_activate()
        if self.state == "destroyed":
            raise self.not_found()
        if self.state == "running":  # re-adopted after a restart of the control plane
            self.spawn(self._watch)

    # -- supervision of the process -------------------------------------------------------

    async def _watch(self) -> None:
        """Follow the process; when it exits, back off and ask for a restart."""
        failures = 0
        while True:
            await trio.sleep(WATCH_SECONDS)
            info = self.running_agent_info()
            process_id = self.record.process_id
            if info is None or process_id is None:
                return
            try:
                process = await self.services.agents.client(info).process(process_id)
            except Exception as exc:  # the agent restarting: look again next time
                log.debug("service %s: no process status: %s", self.id, exc)
                continue
            if process.get("status") == "running":
                if time.monotonic() - self._started_at > STABLE_SECONDS:
                    failures = 0
                continue
            delay = min(BACKOFF_MAX, 2.0 ** failures)
            failures += 1
            log.info("service %s: its process exited (%s); restarting in %.0f s", self.id, process.get("exit_code"), delay)
            await trio.sleep(delay)
            with contextlib.suppress(ApiError):
                await self.ref.tell(Restart(process_id))

    @handles(Restart)
    async def restart(self, message: Restart) -> None:
        next_state = self.transition(message)
        info = self.running_agent_info()
        if info is None:
            return
        agent = self.services.agents.client(info)
        process_id = await self._run(agent)
        await self.persist(state=next_state, process_id=process_id, restarts=self.record.restarts + 1)
        await self.emit("restarted", {**self.subject, "restarts": self.record.restarts})

    @handles(Logs)
    async def logs(self, message: Logs) -> dict[str, Any]:
        if self.state == "destroyed":
            raise self.not_found()
        info = self.running_agent_info()
        if info is None or self.record.process_id is None:
            raise ApiError(502, "RUNTIME_LOGS_UNAVAILABLE", "the service is not running: its logs cannot be read")
        with self.refused():
            try:
                result: dict[str, Any] = await self.services.agents.client(info).logs(self.record.process_id, tail=message.tail)
            except Exception as exc:
                public = public_text(exc, f"service {self.id} logs")
                raise ApiError(502, "RUNTIME_LOGS_UNAVAILABLE", f"the service's logs cannot be read: {public}") from exc
        return result

    @handles(Halt)
    async def halt(self, message: Halt) -> ServiceRecord:
        next_state = self.transition(message)
        await self.halt_instance()
        await self.persist(state=next_state)
        await self.emit("stopped", {**self.subject, "reason": message.reason})
        return self.record

    @handles(StartService)
    async def start(self, message: StartService) -> ServiceRecord:
        next_state = self.transition(message)
        try:
            await self.start_instance()  # the process again, and its health check
        except Exception as exc:  # it stays stopped
            log.warning("service %s did not start again: %s", self.id, exc)
            with contextlib.suppress(Exception):
                await self.halt_instance()
            public = public_message(exc)  # logged above
            raise ApiError(503, "SERVICE_UNAVAILABLE", f"the deployment service did not start again: {public}") from exc
        await self.persist(state=next_state, process_id=self.record.process_id)
        self.spawn(self._watch)
        return self.record

    @handles(StopService)
    async def stop_service(self, message: StopService) -> ServiceRecord:
        next_state = self.transition(message)
        await self.destroy_instance()
        await self.persist(state=next_state)
        return self.record
