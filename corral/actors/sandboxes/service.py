"""Sandbox operations the HTTP layer calls: create, list, get, lifecycle, exec, agent access."""

from __future__ import annotations

import json
import secrets
import time
from typing import Annotated, Any, Literal

from corral.actors.instances import ExecTimeout, clamp_timeout
from corral.actors.sandboxes.services import SandboxServices
from corral.actors.tenancy import EXTERNAL_FIELDS, Placement, resolve_attribution
from corral.actors.tenancy.slugs import slugify
from corral.errors import ApiError, not_found
from corral.ids import new_uuid, prefixed
from corral.models import Rule, model
from corral.storage import Event, Row, Transaction, utc_now_iso
from corral.vm import SIZES, ExecEvent, InstanceInfo

from . import billing_hooks
from .access import agent_for, touch, wait_until_settled
from .actor import SandboxActor, limit_reached
from .env import KEY_PATTERN, EnvVar, copy_vars, put_vars, resolved_env
from .messages import Boot, Booted, Destroy, Fork, Get, Start, Stop
from .processes import resume_watchers

SIZE_NAMES = tuple(SIZES)
ACTIVE_STATES = ("creating", "running")
"""States that count against the tenant's concurrent-sandbox cap."""
MAX_LINE_EVENTS = 2000
"""Line events one exec may publish; the response always has the whole output."""

PUBLIC_FIELDS = (
    "id", "tenant_id", "name", "slug", "template_id", "size", "status", "region", "auto_stop",
    "workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id",
    "metadata", "created_at", "updated_at",
)


def sandbox_public(row: Row) -> dict[str, Any]:
    record = {name: row[name] for name in PUBLIC_FIELDS}
    record["metadata"] = json.loads(row["metadata"])
    if row.get("error"):
        record["error"] = row["error"]
    return record


def _env_keys_problem(env: dict[str, str]) -> str | None:
    return None if all(KEY_PATTERN.fullmatch(key) for key in env) else "keys must match [A-Z][A-Z0-9_]*"


@model
class NewSandbox(Placement):
    """A new sandbox; the template must exist (else `400 INVALID_TEMPLATE`)."""

    template_id: Annotated[str, Rule(message="must be a template name")] = "default"
    name: Annotated[str | None, Rule(max_length=100, message="must be a non-empty string of at most 100 characters")] = None
    size: Literal[SIZE_NAMES] = "small"  # type: ignore[valid-type]
    env: Annotated[dict[str, str] | None, Rule(check=_env_keys_problem, description="sealed; every exec and process sees it")] = None
    auto_stop: Annotated[
        int | None, Rule(minimum=0, message="must be a non-negative integer number of seconds (0 disables)", description="idle seconds; 0 disables")
    ] = None
    metadata: dict[str, Any] | None = None


def _unique_slug(tx: Transaction, base: str) -> str:
    while True:
        # At most 57 characters, so that a preview host's first label `{port}-{slug}`
        # stays within DNS's 63 (docs/api.md "Previews").
        candidate = f"{base[:48].rstrip('-')}-{secrets.token_hex(4)}"
        if not tx.fetch_one("SELECT 1 FROM sandboxes WHERE slug = ?", (candidate,)):
            return candidate


async def _insert(
    platform: SandboxServices, tenant_id: str, owner_user_id: str | None, new: NewSandbox, forked_from: str | None = None
) -> Row:
    attribution = await resolve_attribution(platform.db, tenant_id, new, owner_user_id)

    def work(tx: Transaction) -> Row:
        limit = int(tx.fetch_value("SELECT sandbox_limit FROM tenants WHERE id = ?", (tenant_id,)) or 10)
        marks = ", ".join("?" for _ in ACTIVE_STATES)
        active = int(tx.fetch_value(
            f"SELECT COUNT(*) AS n FROM sandboxes WHERE tenant_id = ? AND status IN ({marks})", (tenant_id, *ACTIVE_STATES)
        ) or 0)
        if active >= limit:
            raise limit_reached(limit)
        now = utc_now_iso()
        row: Row = {
            "id": new_uuid(),
            "tenant_id": tenant_id,
            "owner_user_id": owner_user_id,
            "name": new.name or "sandbox",
            "slug": _unique_slug(tx, slugify(new.name or "sbx", "sbx")),
            "template_id": new.template_id,
            "size": new.size,
            "status": "creating",
            "region": "local",
            "auto_stop": new.auto_stop or None,
            "workspace_id": attribution.workspace_id,
            "project_id": attribution.project_id,
            "external_workspace_id": attribution.external_workspace_id,
            "external_user_id": attribution.external_user_id,
            "external_project_id": attribution.external_project_id,
            "metadata": json.dumps(new.metadata or {}),
            "error": None,
            "forked_from": forked_from,
            "last_activity_at": now,
            "created_at": now,
            "updated_at": now,
        }
        tx.insert("sandboxes", row)
        return row

    row = await platform.db.transaction(work)
    await platform.bus.publish(Event("sandbox.created", "sandbox", row["id"], {"sandbox_id": row["id"]}, tenant_id=tenant_id))
    return row


async def create_sandbox(platform: SandboxServices, tenant_id: str, owner_user_id: str | None, new: NewSandbox) -> Row:
    if not platform.runtime.templates.exists(new.template_id):
        raise ApiError(400, "INVALID_TEMPLATE", f"unknown template_id: {new.template_id}")
    await billing_hooks.allow_create(platform, tenant_id, new.size, new.external_user_id)  # 402 / quota 409
    row = await _insert(platform, tenant_id, owner_user_id, new)
    if new.env:
        await put_vars(platform, row, [EnvVar(key, value) for key, value in new.env.items()])
    ref = await platform.system.get(SandboxActor, row["id"])
    await ref.ask(Boot())
    return await wait_until_settled(platform, row["id"], platform.settings.sandbox_ready_wait)


async def fork_sandbox(platform: SandboxServices, tenant_id: str, owner_user_id: str | None, source: Row) -> Row:
    new = NewSandbox(
        template_id=source["template_id"], name=f"{source['name']}-fork"[:100], size=source["size"], auto_stop=source["auto_stop"],
        metadata=json.loads(source["metadata"]), workspace_id=source["workspace_id"], project_id=source["project_id"],
        **{name: source[name] for name in EXTERNAL_FIELDS},
    )
    await billing_hooks.allow_create(platform, tenant_id, new.size, new.external_user_id)  # 402 / quota 409
    row = await _insert(platform, tenant_id, owner_user_id, new, forked_from=source["id"])
    await copy_vars(platform, source, row)
    source_ref = await platform.system.get(SandboxActor, source["id"])
    target_ref = await platform.system.get(SandboxActor, row["id"])
    try:
        info: InstanceInfo = await source_ref.ask(Fork(row["id"]))
    except Exception as exc:
        await target_ref.ask(Booted(None, f"fork failed: {exc}"))
        raise
    await target_ref.ask(Booted(info))
    result: Row = await target_ref.ask(Get())
    return result


async def recover_interrupted(platform: SandboxServices) -> int:
    """At start-up: boot sandboxes whose creation was cut off; an interrupted fork is an error."""
    rows = await platform.db.fetch_all("SELECT id, forked_from FROM sandboxes WHERE status = 'creating'")
    for row in rows:
        ref = await platform.system.get(SandboxActor, row["id"])
        if row["forked_from"]:
            await ref.ask(Booted(None, "the control plane stopped while the fork was being made"))
        else:
            await ref.ask(Boot())
    return len(rows)


async def start_background(platform: SandboxServices) -> None:
    """At start-up: follow the processes that kept running."""
    await resume_watchers(platform)


async def find_sandbox(platform: SandboxServices, tenant_id: str, sandbox_id: str) -> Row:
    row = await platform.db.fetch_one(
        "SELECT * FROM sandboxes WHERE id = ? AND tenant_id = ? AND status != 'destroyed'", (sandbox_id, tenant_id)
    )
    if row is None:
        raise not_found("sandbox not found")
    return row


async def list_sandboxes(platform: SandboxServices, tenant_id: str, filters: dict[str, str]) -> list[Row]:
    clauses, params = ["tenant_id = ?", "status != 'destroyed'"], [tenant_id]
    for column, value in filters.items():
        clauses.append(f"{column} = ?")
        params.append(value)
    return await platform.db.fetch_all(
        f"SELECT * FROM sandboxes WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, id", tuple(params)
    )


async def lifecycle(platform: SandboxServices, sandbox_id: str, message: Start | Stop | Destroy) -> Row:
    if isinstance(message, Start):
        await billing_hooks.allow_start(platform, sandbox_id)  # 402 / quota 409
    ref = await platform.system.get(SandboxActor, sandbox_id)
    row: Row = await ref.ask(message, timeout=120)
    return row




class _LineEvents:
    """Turns output chunks into `sandbox.exec.stdout/stderr` line events."""

    def __init__(self, platform: SandboxServices, row: Row, exec_id: str) -> None:
        self.platform, self.row, self.exec_id = platform, row, exec_id
        self.partial = {"stdout": "", "stderr": ""}
        self.published = 0

    async def feed(self, event: ExecEvent) -> None:
        text = self.partial[event.type] + event.data
        *lines, self.partial[event.type] = text.split("\n")
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
        await publish(self.platform, self.row, f"sandbox.exec.{stream}", {"exec_id": self.exec_id, "line": line})


async def publish(platform: SandboxServices, row: Row, event_type: str, data: dict[str, Any]) -> None:
    await platform.bus.publish(Event(event_type, "sandbox", row["id"], data, tenant_id=row["tenant_id"]))


@model
class ExecRequest:
    """A command run to completion under `/bin/sh -c`, with its output."""

    command: Annotated[str, Rule(strip=False)]
    timeout: ExecTimeout = None
    cwd: Annotated[str | None, Rule(check=lambda path: None if path.startswith("/") else "must be an absolute path")] = None
    env: Annotated[dict[str, str] | None, Rule(description="after the sandbox's own variables")] = None


async def exec_command(platform: SandboxServices, row: Row, request: ExecRequest) -> dict[str, Any]:
    command, cwd = request.command, request.cwd
    timeout = clamp_timeout(request.timeout)
    agent = await agent_for(platform, row["id"], record_activity=False)  # recorded when it ends
    env = {**await resolved_env(platform, row), **(request.env or {})}
    exec_id = prefixed("exec")
    await publish(platform, row, "sandbox.exec.started", {"exec_id": exec_id, "command": command})
    lines = _LineEvents(platform, row, exec_id)
    started = time.monotonic()
    result = await agent.exec(command, timeout=timeout, cwd=cwd, env=env, on_output=lines.feed)
    await lines.flush()
    await publish(
        platform, row, "sandbox.exec.completed",
        {"exec_id": exec_id, "exit_code": result.exit_code, "duration_ms": result.duration_ms},
    )
    await touch(platform, row["id"])
    return {
        "exec_id": exec_id,
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "duration_ms": result.duration_ms or int((time.monotonic() - started) * 1000),
        "timed_out": result.timed_out,
    }
