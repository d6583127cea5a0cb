"""Sandbox operations the HTTP layer calls: create, list, get, lifecycle, exec, agent access."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import trio

from corral.actors.instances import (
    Command,
    CommandEnv,
    ExecTimeout,
    RunningInstance,
    clamp_timeout,
    values_without_nul,
)
from corral.actors.nodes import claims, placement
from corral.actors.nodes.lost import public_error
from corral.actors.runtime_errors import public_text
from corral.actors.sandboxes.services import SandboxServices, SandboxTemplate
from corral.actors.tenancy import Attribution, Placement, resolve_attribution
from corral.actors.timings import timed
from corral.errors import ApiError, not_found
from corral.ids import new_uuid, prefixed
from corral.models import ABSOLUTE_PATH, Rule, model
from corral.storage import Event
from corral.vm import SIZES, ExecEvent, InstanceInfo

from . import billing_hooks, store
from .access import agent_for, touch, wait_until_settled
from .actor import SandboxActor
from .env import KEY_PATTERN, EnvVar, copy_vars, put_vars, resolved_env
from .messages import Boot, Booted, Destroy, Fork, Get, Start, Stop
from .processes import resume_watchers
from .store import SandboxDraft, SandboxRecord

SIZE_NAMES = tuple(SIZES)
MAX_LINE_EVENTS = 2000
MAX_LINE_CHARS = 16384
"""A longer line is published as several events (the whole of it is in the answer)."""
"""Line events one exec may publish; the response always has the whole output."""

PUBLIC_FIELDS = (
    "id", "tenant_id", "name", "slug", "template_id", "size", "status", "region", "node", "auto_stop",
    "workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id",
    "metadata", "created_at", "updated_at",
)


def sandbox_public(sandbox: SandboxRecord) -> dict[str, Any]:
    public = {name: getattr(sandbox, name) for name in PUBLIC_FIELDS}
    if sandbox.error:
        public["error"] = public_error(sandbox.error)
    return public


@model
class NewSandbox(Placement):
    """A new sandbox; the template must exist (else `400 INVALID_TEMPLATE`)."""

    template_id: Annotated[str, Rule(message="must be a template name")] = "default"
    name: Annotated[str | None, Rule(max_length=100, message="must be a non-empty string of at most 100 characters")] = None
    size: Literal[SIZE_NAMES] = "small"  # type: ignore[valid-type]
    env: Annotated[
        dict[str, str] | None, Rule(keys=KEY_PATTERN.pattern, check=values_without_nul, description="sealed; every exec and process sees it")
    ] = None
    auto_stop: Annotated[
        int | None, Rule(minimum=0, message="must be a non-negative integer number of seconds (0 disables)", description="idle seconds; 0 disables")
    ] = None
    metadata: dict[str, Any] | None = None
    region: Annotated[
        str | None, Rule(description="one of CORRAL_REGIONS: placed on a node of that region (default: the node that places it)")
    ] = None


async def create_sandbox(
    platform: SandboxServices,
    tenant_id: str,
    owner_user_id: str | None,
    new: NewSandbox,
    *,
    key_workspace_id: str | None = None,
) -> SandboxRecord:
    template = await _template_of(platform, tenant_id, new)
    region = placement.region_of(platform.settings.regions, platform.settings.node_region, new.region)
    await billing_hooks.allow_create(platform, tenant_id, new.size, new.external_user_id)  # 402 / quota 409
    attribution = await resolve_attribution(platform.db, tenant_id, new, owner_user_id, key_workspace_id=key_workspace_id)
    draft = SandboxDraft(
        attribution=attribution, owner_user_id=owner_user_id, name=new.name, template_id=template.id,
        size=new.size, auto_stop=new.auto_stop, metadata=new.metadata or {}, region=region,
    )
    pool = platform.warm_pool
    pooled = pool.take(template.id, new.size) if pool is not None else None
    sandbox_id = pooled or new_uuid()
    try:
        await claims.bind(platform.db, sandbox_id)  # placement's claim: from its row on, the row counts
        ref = await platform.system.create(SandboxActor, sandbox_id, draft)
    except BaseException:
        if pooled is not None:  # untouched: back to the pool (a taken one is never returned)
            assert pool is not None
            pool.give_back(template.id, new.size, pooled)
        raise
    record: SandboxRecord = await ref.ask(Get())
    env = {**template.env, **(new.env or {})}
    if env:
        await put_vars(platform, record, [EnvVar(key, value) for key, value in env.items()])
    await ref.ask(Boot())
    return await wait_until_settled(platform, record.id, platform.settings.sandbox_ready_wait)


async def _template_of(platform: SandboxServices, tenant_id: str, new: NewSandbox) -> SandboxTemplate:
    """The tenant's template by id or name, else a built-in one (`400 INVALID_TEMPLATE`)."""
    resolver = platform.sandbox_templates
    found = await resolver.resolve(platform, tenant_id, new.template_id, new.workspace_id) if resolver else None
    if found is not None:
        return found
    templates = platform.runtime.templates
    if not templates.exists(new.template_id) or templates.is_layered(new.template_id):  # another tenant's layers are not built-ins
        raise ApiError(400, "INVALID_TEMPLATE", f"unknown template_id: {new.template_id}")
    return SandboxTemplate(new.template_id)


async def fork_sandbox(
    platform: SandboxServices, tenant_id: str, owner_user_id: str | None, source: SandboxRecord
) -> SandboxRecord:
    draft = SandboxDraft(
        attribution=Attribution.of(source), owner_user_id=owner_user_id, name=f"{source.name}-fork"[:100],
        template_id=source.template_id, size=source.size, auto_stop=source.auto_stop, metadata=source.metadata,
        forked_from=source.id, region=source.region,
    )
    await billing_hooks.allow_create(platform, tenant_id, draft.size, source.external_user_id)  # 402 / quota 409
    with timed(platform, "sandbox", "fork"):
        return await _fork(platform, source, draft)


async def _fork(platform: SandboxServices, source: SandboxRecord, draft: SandboxDraft) -> SandboxRecord:
    target_ref = await platform.system.create(SandboxActor, new_uuid(), draft)
    record: SandboxRecord = await target_ref.ask(Get())
    await copy_vars(platform, source, record)
    source_ref = await platform.system.get(SandboxActor, source.id)
    try:
        info: InstanceInfo = await source_ref.ask(Fork(record.id))
    except Exception as exc:
        await target_ref.ask(Booted(None, f"fork failed: {public_text(exc, f'sandbox {source.id} fork')}"))
        raise
    await target_ref.ask(Booted(info))
    result: SandboxRecord = await target_ref.ask(Get())
    return result


async def recover_interrupted(platform: SandboxServices) -> int:
    """At start-up: boot sandboxes whose creation was cut off; an interrupted fork is an error."""
    interrupted = await store.being_created(platform.db, platform.settings.node_name)
    for record in interrupted:
        ref = await platform.system.get(SandboxActor, record.id)
        if record.forked_from:
            await ref.ask(Booted(None, "the control plane stopped while the fork was being made"))
        else:
            await ref.ask(Boot())
    return len(interrupted)


async def start_background(platform: SandboxServices) -> None:
    """At start-up: follow the processes that kept running."""
    await resume_watchers(platform)


async def find_sandbox(
    platform: SandboxServices, tenant_id: str, sandbox_id: str, *, key_workspace_id: str | None = None
) -> SandboxRecord:
    """The tenant's sandbox; 404 for another tenant's, and for one outside the workspace a
    restricted key is limited to."""
    record = await store.find(platform.db, tenant_id, sandbox_id)
    if record is None or (key_workspace_id is not None and record.workspace_id != key_workspace_id):
        raise not_found("sandbox not found")
    return record


async def find_running_sandbox(
    platform: SandboxServices, tenant_id: str, sandbox_id: str, *, key_workspace_id: str | None = None
) -> SandboxRecord:
    """`find_sandbox` for a call on the running instance (exec): the record the running
    sandbox's actor publishes, without a store read, when it is the tenant's; else the
    store's answer. Its activity times may lag the store's by the write-behind."""
    running: RunningInstance | None = platform.system.view_of(SandboxActor, sandbox_id)
    if running is not None:
        record: SandboxRecord = running.record
        if record.tenant_id == tenant_id and (key_workspace_id is None or record.workspace_id == key_workspace_id):
            return record
    return await find_sandbox(platform, tenant_id, sandbox_id, key_workspace_id=key_workspace_id)


async def list_sandboxes(
    platform: SandboxServices, tenant_id: str, filters: dict[str, str], *, key_workspace_id: str | None = None
) -> list[SandboxRecord]:
    return await store.list_for_tenant(platform.db, tenant_id, filters, within_workspace=key_workspace_id)


async def lifecycle(platform: SandboxServices, sandbox_id: str, message: Start | Stop | Destroy) -> SandboxRecord:
    if isinstance(message, Start):
        await billing_hooks.allow_start(platform, sandbox_id)  # 402 / quota 409
    ref = await platform.system.get(SandboxActor, sandbox_id)
    record: SandboxRecord = await ref.ask(message, timeout=120)
    return record


class _LineEvents:
    """Turns output chunks into `sandbox.exec.stdout/stderr` line events."""

    def __init__(self, platform: SandboxServices, sandbox: SandboxRecord, exec_id: str) -> None:
        self.platform, self.sandbox, self.exec_id = platform, sandbox, exec_id
        self.partial = {"stdout": "", "stderr": ""}
        self.published = 0

    async def feed(self, event: ExecEvent) -> None:
        if self.published >= MAX_LINE_EVENTS:
            return  # nothing more is published: nothing more is kept
        text = self.partial[event.type] + event.data
        *lines, rest = text.split("\n")
        while len(rest) > MAX_LINE_CHARS:  # a line without end: published in parts
            lines.append(rest[:MAX_LINE_CHARS])
            rest = rest[MAX_LINE_CHARS:]
        self.partial[event.type] = rest
        for line in lines:
            await self.line(event.type, line)

    async def flush(self) -> None:
        for stream, rest in self.partial.items():
            if rest:
                await self.line(stream, rest)
        self.partial = {"stdout": "", "stderr": ""}

    async def line(self, stream: str, line: str) -> None:
        if self.published >= MAX_LINE_EVENTS:
            return
        self.published += 1
        await publish(self.platform, self.sandbox, f"sandbox.exec.{stream}", {"exec_id": self.exec_id, "line": line})


async def publish(platform: SandboxServices, sandbox: SandboxRecord, event_type: str, data: dict[str, Any]) -> None:
    await platform.bus.publish(Event(event_type, "sandbox", sandbox.id, data, tenant_id=sandbox.tenant_id))


@model
class ExecRequest:
    """A command run to completion under `/bin/sh -c`, with its output."""

    command: Command
    timeout: ExecTimeout = None
    cwd: Annotated[str | None, Rule(pattern=ABSOLUTE_PATH, message="must be an absolute path")] = None
    env: CommandEnv = None


async def exec_command(platform: SandboxServices, sandbox: SandboxRecord, request: ExecRequest) -> dict[str, Any]:
    command, cwd = request.command, request.cwd
    timeout = clamp_timeout(request.timeout)
    agent = await agent_for(platform, sandbox.id, record_activity=False)  # recorded when it ends
    env = {**await resolved_env(platform, sandbox), **(request.env or {})}
    exec_id = prefixed("exec")
    announced = False

    async def announce() -> None:
        """`sandbox.exec.started`, the exec's first event: published once the command is
        on its way to the agent, while it runs there (issue 28: off the exec's path)."""
        nonlocal announced
        if not announced:
            announced = True
            await publish(platform, sandbox, "sandbox.exec.started", {"exec_id": exec_id, "command": command})

    lines = _LineEvents(platform, sandbox, exec_id)
    started = time.monotonic()
    try:
        with timed(platform, "sandbox", "exec"):
            result = await agent.exec(command, timeout=timeout, cwd=cwd, env=env, on_output=lines.feed, on_sent=announce)
    finally:
        if not announced:  # it never reached the agent: the exec began all the same
            with trio.CancelScope(shield=True):
                await announce()
    await lines.flush()
    await publish(
        platform, sandbox, "sandbox.exec.completed",
        {"exec_id": exec_id, "exit_code": result.exit_code, "duration_ms": result.duration_ms},
    )
    await touch(platform, sandbox.id)
    return {
        "exec_id": exec_id,
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "duration_ms": result.duration_ms or int((time.monotonic() - started) * 1000),
        "timed_out": result.timed_out,
        "output_truncated": result.truncated,
    }
