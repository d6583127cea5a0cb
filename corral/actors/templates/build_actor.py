"""`BuildActor`: one template build, a kind of instance actor (`corral.actors.instances`).

States (contract §15): queued -> building (Boot) -> ready | failed (Booted);
queued/building -> cancelled (Cancel). The build boots an instance of the template's
base; the boot child (`after_create`) runs the steps (`steps.py`) with their output
written as log lines, stops the instance, keeps its writable layer as the template's
new layer (`RuntimeDriver.save_template_layer`) and removes the instance. A build
that fails or is cancelled removes its instance too. When the build ends, the
template's row follows: `ready` with the new layer, else `failed` unless an earlier
build gave it a layer (sandboxes keep starting from that one).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.instances import Boot, Booted, InstanceActor
from corral.actors.runtime_errors import PublicError
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError
from corral.storage import utc_now_iso
from corral.vm import InstanceInfo, InstanceNotFound

from . import copies, store
from .messages import Cancel
from .sealing import unseal
from .steps import STEP_TIMEOUT, LogWriter, steps
from .store import BuildRecord, TemplateRecord

log = logging.getLogger("corral.templates")

KIND = "template_build"


class BuildFailed(PublicError):
    """A step exited non-zero, or the template went away."""


class BuildActor(InstanceActor):
    kind = KIND
    store = store.BUILDS
    record: BuildRecord
    booting_state = "building"
    error_state = "failed"
    error_column = "error"
    gone_states = ("ready", "failed", "cancelled")
    transitions = TransitionTable(
        {
            ("queued", Boot): "building",
            ("building", Boot): "building",
            ("building", Booted): "ready",
            (("queued", "building"), Cancel): "cancelled",
        },
        refusals={
            Cancel: ("BUILD_ALREADY_TERMINAL", "the build is already ready, failed or cancelled"),
            Boot: ("INVALID_STATE", "the build is not queued"),
            Booted: ("INVALID_STATE", "the build is not building"),
        },
    )

    _layer_size: int | None = None
    _layer_archive: str | None = None
    _log: LogWriter | None = None

    def not_found(self) -> ApiError:
        return ApiError(404, "BUILD_NOT_FOUND", "build not found")

    async def create_record(self, draft: BuildRecord) -> BuildRecord:
        """The row `start_build` inserted with its caps' check (one transaction)."""
        if await store.load_build(self.db, draft.id) is None:
            await self.db.transaction(lambda tx: store.insert_build(tx, draft))
        self.tenant_id = draft.tenant_id
        return draft

    async def on_instance_lost(self) -> None:
        """Its node was lost mid-build (the build reads `failed` with `NODE_LOST`): the
        template follows, so it is not left `building` and can be built again."""
        await self._template_follows()

    def runtime_template(self) -> str:
        return self.record.base

    @property
    def subject(self) -> dict[str, Any]:
        return {"build_id": self.id, "template_id": self.record.template_id}

    @property
    def logs(self) -> LogWriter:
        if self._log is None:
            self._log = LogWriter(lambda lines: store.append_log(self.db, self.id, lines))
        return self._log

    async def template(self) -> TemplateRecord:
        template = await store.load_template(self.db, self.record.template_id)
        if template is None:
            raise BuildFailed("the template was deleted")
        return template

    async def boot_env(self) -> dict[str, str]:
        """The template's env, for the build's steps too (in memory only)."""
        template = await store.load_template(self.db, self.record.template_id)
        return {} if template is None else unseal(self.services.secrets, template)

    # -- the build ----------------------------------------------------------------------

    @handles(Boot)
    async def boot(self, message: Boot) -> None:
        next_state = self.transition(message)
        await self.persist(state=next_state, started_at=utc_now_iso())
        await self.logs.line(f"build {self.id} of template {self.record.template_id} started on {self.record.base}")
        await super().boot(message)

    async def after_create(self, info: InstanceInfo) -> str | None:
        try:
            await self._run_steps(info)
            await self.logs.line("keeping the result as the template's new layer")
            await self.halt_instance()
            driver = await self.driver()
            with self.refused():
                self._layer_size = await driver.save_template_layer(self.id, self.record.template_id, self.id)
                self._layer_archive = await copies.keep_elsewhere(
                    self.services.blobs, driver, self.services.settings.data_dir, self.record.template_id, self.id
                )
        finally:
            with trio.CancelScope(shield=True):
                await self._remove_instance()
        return None

    async def _run_steps(self, info: InstanceInfo) -> None:
        template = await self.template()
        agent = self.services.agents.client(info)
        env = unseal(self.services.secrets, template)
        for title, command in steps(template.packages, template.setup):
            await self.logs.line(f"$ {title}")
            exit_code, timed_out = None, False
            async with contextlib.aclosing(agent.exec_stream(command, timeout=STEP_TIMEOUT, cwd="/root", env=env, combined=True)) as events:
                async for event in events:
                    if event.type == "exit":
                        exit_code, timed_out = event.exit_code, event.timed_out
                    else:
                        await self.logs.feed(event.data)
            await self.logs.flush()
            if timed_out:
                raise BuildFailed(f"step timed out after {int(STEP_TIMEOUT)} s: {title}")
            if exit_code != 0:
                raise BuildFailed(f"step exited with {exit_code}: {title}")

    async def _remove_instance(self) -> None:
        with contextlib.suppress(InstanceNotFound, ApiError):
            await (await self.driver()).destroy(self.instance_id)
        self.info = None
        await self.services.agents.forget(self.instance_id)

    @handles(Booted)
    async def booted(self, message: Booted) -> None:
        next_state = self.transition(message)
        now = utc_now_iso()
        if message.info is None:
            with trio.CancelScope(shield=True):
                await self._remove_instance()  # made before the step that failed, or before a restart
            await self._template_follows("failed")
            await self.logs.line(f"build failed: {message.error}")
            await self.persist(state="failed", error=message.error, finished_at=now)
            await self.emit("failed", {**self.subject, "error": message.error})
            return
        self.info = None
        await self._template_follows(next_state)
        await self.logs.line(f"build ready ({self._layer_size} bytes)")
        await self.persist(
            state=next_state, error=None, finished_at=now, size_bytes=self._layer_size, archive_sha256=self._layer_archive
        )
        await self.emit("ready", self.subject)

    @handles(Cancel)
    async def cancel(self, message: Cancel) -> BuildRecord:
        next_state = self.transition(message)
        await self.destroy_instance()  # cancels the boot child first
        await self._template_follows(next_state)
        await self.logs.line("build cancelled")
        await self.persist(state=next_state, finished_at=utc_now_iso())
        await self.emit("cancelled", self.subject)
        return self.record

    async def on_failed(self, error: BaseException) -> None:
        await super().on_failed(error)
        with contextlib.suppress(Exception):
            await self._template_follows()

    async def _template_follows(self, ending: str | None = None) -> None:
        """The template's row as this build ends in `ending` (its state by default),
        unless a newer build is running. Written before the build's own row (as is its
        last log line): whoever sees the build ended finds its template, and its log,
        as it left them."""
        template = await store.load_template(self.db, self.record.template_id)
        if template is None:
            return
        now = utc_now_iso()
        if (ending or self.state) == "ready":
            await store.update_template(
                self.db, template.id, {"status": "ready", "size_bytes": self._layer_size, "layer_build_id": self.id, "updated_at": now}
            )
            return
        latest = await store.latest_build(self.db, template.id)
        if latest is not None and latest.id != self.id:
            return
        if template.layer_build_id is None:
            await store.update_template(self.db, template.id, {"status": "failed", "updated_at": now})
