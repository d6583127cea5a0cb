"""Sandbox operations the HTTP layer calls: create, list, get, lifecycle, exec, agent access."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from corral.actors.instances import clamp_timeout
from corral.actors.sandboxes.services import SandboxServices
from corral.actors.tenancy import resolve_attribution
from corral.actors.tenancy.slugs import slugify
from corral.errors import ApiError, not_found, validation_error
from corral.ids import new_uuid, prefixed
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


@dataclass(frozen=True)
class NewSandbox:
    template_id: str
    name: str | None
    size: str
    env: dict[str, str]
    auto_stop: int | None
    metadata: dict[str, Any]


def parse_new_sandbox(body: dict[str, Any], known_template: Any) -> NewSandbox:
    errors: dict[str, str] = {}
    template_id = body.get("template_id", "default")
    name = body.get("name")
    size = body.get("size", "small")
    env = body.get("env") or {}
    auto_stop = body.get("auto_stop")
    metadata = body.get("metadata") or {}
    if not isinstance(template_id, str) or not template_id:
        errors["template_id"] = "must be a template name"
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 100):
        errors["name"] = "must be a non-empty string of at most 100 characters"
    if size not in SIZE_NAMES:
        errors["size"] = f"must be one of {', '.join(SIZE_NAMES)}"
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        errors["env"] = "must be an object of string values"
    elif not all(KEY_PATTERN.fullmatch(key) for key in env):
        errors["env"] = "keys must match [A-Z][A-Z0-9_]*"
    if auto_stop is not None and (isinstance(auto_stop, bool) or not isinstance(auto_stop, int) or auto_stop < 0):
        errors["auto_stop"] = "must be a non-negative integer number of seconds (0 disables)"
    if not isinstance(metadata, dict):
        errors["metadata"] = "must be an object"
    if errors:
        raise validation_error(errors)
    if not known_template(template_id):
        raise ApiError(400, "INVALID_TEMPLATE", f"unknown template_id: {template_id}")
    return NewSandbox(template_id, name.strip() if name else None, size, env, auto_stop or None, metadata)


def _unique_slug(tx: Transaction, base: str) -> str:
    while True:
        # At most 57 characters, so that a preview host's first label `{port}-{slug}`
        # stays within DNS's 63 (docs/api.md "Previews").
        candidate = f"{base[:48].rstrip('-')}-{secrets.token_hex(4)}"
        if not tx.fetch_one("SELECT 1 FROM sandboxes WHERE slug = ?", (candidate,)):
            return candidate


async def _insert(
    platform: SandboxServices, tenant_id: str, owner_user_id: str | None, new: NewSandbox, body: dict[str, Any], forked_from: str | None = None
) -> Row:
    attribution = await resolve_attribution(platform.db, tenant_id, body, owner_user_id)

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
            "auto_stop": new.auto_stop,
            "workspace_id": attribution.workspace_id,
            "project_id": attribution.project_id,
            "external_workspace_id": attribution.external_workspace_id,
            "external_user_id": attribution.external_user_id,
            "external_project_id": attribution.external_project_id,
            "metadata": json.dumps(new.metadata),
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


async def create_sandbox(platform: SandboxServices, tenant_id: str, owner_user_id: str | None, body: dict[str, Any]) -> Row:
    runtime = platform.runtime
    new = parse_new_sandbox(body, runtime.templates.exists)
    await billing_hooks.allow_create(platform, tenant_id, new.size, body)  # 402 / quota 409
    row = await _insert(platform, tenant_id, owner_user_id, new, body)
    if new.env:
        await put_vars(platform, row, [EnvVar(key, value) for key, value in new.env.items()])
    ref = await platform.system.get(SandboxActor, row["id"])
    await ref.ask(Boot())
    return await wait_until_settled(platform, row["id"], platform.settings.sandbox_ready_wait)


async def fork_sandbox(platform: SandboxServices, tenant_id: str, owner_user_id: str | None, source: Row) -> Row:
    new = NewSandbox(source["template_id"], f"{source['name']}-fork"[:100], source["size"], {}, source["auto_stop"], json.loads(source["metadata"]))
    body = {"workspace_id": source["workspace_id"], "project_id": source["project_id"]}
    body.update({k: source[k] for k in ("external_workspace_id", "external_user_id", "external_project_id") if source[k]})
    await billing_hooks.allow_create(platform, tenant_id, new.size, body)  # 402 / quota 409
    row = await _insert(platform, tenant_id, owner_user_id, new, body, forked_from=source["id"])
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


async def exec_command(platform: SandboxServices, row: Row, body: dict[str, Any]) -> dict[str, Any]:
    command = body.get("command")
    if command is None or (isinstance(command, str) and not command.strip()):
        raise ApiError(400, "MISSING_PARAM", "command is required")
    if not isinstance(command, str):
        raise validation_error({"command": "must be a string"})
    timeout = clamp_timeout(body.get("timeout"))
    cwd = body.get("cwd")
    env = body.get("env") or {}
    if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")):
        raise validation_error({"cwd": "must be an absolute path"})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise validation_error({"env": "must be an object of string values"})
    agent = await agent_for(platform, row["id"], record_activity=False)  # recorded when it ends
    env = {**await resolved_env(platform, row), **env}
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
