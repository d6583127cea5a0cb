"""Sandbox templates and builds (contract §15): the operations the HTTP layer calls.

A template is a row (name unique in its workspace) over a built-in base with
packages, setup commands, env (sealed) and a default preview port; each build is an
actor (`BuildActor`). Creating a template starts its first build; `POST
/sandbox-templates/{id}/builds` rebuilds, `retry` rebuilds after a failed or
cancelled build; one build of a template runs at a time (`409 BUILD_IN_PROGRESS`).
A template keeps the status of its builds until one is ready; a rebuild of a ready
template leaves it `ready` (sandboxes start from its current layer meanwhile).

The built-ins `default` and `svc-desktop` are listed with `builtin: true`; they are
not rows. Deleting a template removes its row at once and its files once no sandbox
made from it is left (sandboxes that use it keep running and starting).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import trio

from corral.actors.instances import (
    MAX_VARS,
    Boot,
    Booted,
    Get,
    commands_without_nul,
    values_without_nul,
)
from corral.actors.nodes import claims
from corral.actors.sandboxes.env import KEY_PATTERN
from corral.actors.tenancy import Placement, resolve_attribution
from corral.actors.tenancy.store import tenants
from corral.errors import ApiError, conflict, not_found
from corral.ids import UUID_PATTERN, is_uuid, new_uuid
from corral.models import Rule, model
from corral.storage import Transaction, utc_now_iso

from . import cleanup, store
from .build_actor import BuildActor
from .messages import Cancel
from .sealing import seal
from .services import TemplateServices
from .steps import PACKAGE
from .store import BuildRecord, LogLine, TemplateRecord

BUILTINS = ("default", "svc-desktop")
BASES = BUILTINS
TEMPLATE_NAME = f"(?!{UUID_PATTERN}$)[a-z0-9][a-z0-9._-]{{0,62}}"
"""A template's own name: never a UUID, which names a build."""
NAME = re.compile(f"^{TEMPLATE_NAME}$")
MAX_PACKAGES = 200
MAX_SETUP = 50
BUILD_SIZE = "small"
FOLLOW_POLL = 0.25
MAX_ACTIVE_BUILDS = 5
"""Builds one tenant may have queued or building at once (each runs an instance)."""


def _build_limit_reached() -> ApiError:
    return conflict("BUILD_LIMIT_REACHED", f"at most {MAX_ACTIVE_BUILDS} builds of a tenant may run at once")


@model
class NewTemplate:
    """A template built from `base` with `packages` and `setup`; its first build starts at once."""

    name: Annotated[
        str,
        Rule(pattern=TEMPLATE_NAME, message="must be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit (not a UUID)"),
    ]
    base: Annotated[str, Rule(description="a built-in template: default or svc-desktop")] = "default"
    packages: Annotated[
        list[str] | None, Rule(max_length=MAX_PACKAGES, items=Rule(pattern=PACKAGE.pattern.strip("^$")), description="Debian package names")
    ] = None
    setup: Annotated[
        list[str] | None,
        Rule(max_length=MAX_SETUP, items=Rule(strip=False, max_length=10_000), check=commands_without_nul, description="shell commands run as root"),
    ] = None
    env: Annotated[
        dict[str, str] | None,
        Rule(keys=KEY_PATTERN.pattern, max_length=MAX_VARS, check=values_without_nul, description="sealed; builds and sandboxes made from it see it"),
    ] = None
    default_preview_port: Annotated[int | None, Rule(minimum=1, maximum=65535, message="must be a port from 1 to 65535")] = None
    workspace_id: Annotated[str | None, Rule(format="uuid")] = None


@dataclass(frozen=True)
class Builtin:
    name: str

    def public(self) -> dict[str, Any]:
        return {
            "id": self.name, "name": self.name, "base": None, "status": "ready", "builtin": True,
            "default_preview_port": None, "size_bytes": None, "workspace_id": None, "created_at": None, "updated_at": None,
        }


def template_public(template: TemplateRecord, latest: BuildRecord | None = None) -> dict[str, Any]:
    return {
        "id": template.id,
        "name": template.name,
        "base": template.base,
        "status": template.status,
        "builtin": False,
        "default_preview_port": template.default_preview_port,
        "size_bytes": template.size_bytes,
        "workspace_id": template.workspace_id,
        "packages": template.packages,
        "setup": template.setup,
        "env_keys": template.env_keys,
        "latest_build_id": latest.id if latest else None,
        "created_at": template.created_at,
        "updated_at": template.updated_at,
    }


def build_public(build: BuildRecord) -> dict[str, Any]:
    return {
        "id": build.id,
        "template_id": build.template_id,
        "status": build.status,
        "error": build.error,
        "size_bytes": build.size_bytes,
        "started_at": build.started_at,
        "finished_at": build.finished_at,
        "created_at": build.created_at,
        "node": build.node,
    }


def template_not_found(ref: str) -> ApiError:
    return not_found(f"template not found: {ref}", code="TEMPLATE_NOT_FOUND")


def build_not_found() -> ApiError:
    return not_found("build not found", code="BUILD_NOT_FOUND")


def _in_key_workspace(template: TemplateRecord, key_workspace_id: str | None) -> bool:
    return key_workspace_id is None or template.workspace_id == key_workspace_id


async def find_template(
    services: TemplateServices, tenant_id: str, ref: str, *, key_workspace_id: str | None = None
) -> TemplateRecord | Builtin:
    """A built-in by name, or the tenant's template by id or name (404 TEMPLATE_NOT_FOUND)."""
    if ref in BUILTINS:
        return Builtin(ref)
    template = await store.find_template(services.db, tenant_id, ref, key_workspace_id)
    if template is None or not _in_key_workspace(template, key_workspace_id):
        raise template_not_found(ref)
    return template


async def list_templates(
    services: TemplateServices, tenant_id: str, workspace_id: str | None = None, *, key_workspace_id: str | None = None
) -> list[tuple[TemplateRecord | Builtin, BuildRecord | None]]:
    records = await store.list_templates(services.db, tenant_id, workspace_id or key_workspace_id)
    found: list[tuple[TemplateRecord | Builtin, BuildRecord | None]] = [(Builtin(name), None) for name in BUILTINS]
    for record in records:
        found.append((record, await store.latest_build(services.db, record.id)))
    return found


async def latest_build(services: TemplateServices, template: TemplateRecord) -> BuildRecord | None:
    return await store.latest_build(services.db, template.id)


async def create_template(
    services: TemplateServices, tenant_id: str, owner_user_id: str | None, new: NewTemplate, *, key_workspace_id: str | None = None
) -> tuple[TemplateRecord, BuildRecord]:
    if new.base not in BASES:
        raise ApiError(400, "INVALID_TEMPLATE", f"unknown base template: {new.base} (one of {', '.join(BASES)})")
    if new.name in (*BUILTINS, "desktop"):
        raise conflict("TEMPLATE_NAME_TAKEN", f"{new.name} is a built-in template")
    workspace_id = new.workspace_id or key_workspace_id
    if key_workspace_id is not None and workspace_id != key_workspace_id:
        raise not_found("workspace not found")
    attribution = await resolve_attribution(services.db, tenant_id, Placement(workspace_id=workspace_id), owner_user_id)
    template_id = new_uuid()
    env = new.env or {}
    now = utc_now_iso()
    template = TemplateRecord(
        id=template_id,
        tenant_id=tenant_id,
        workspace_id=attribution.workspace_id,
        name=new.name,
        base=new.base,
        packages=list(dict.fromkeys(new.packages or [])),
        setup=list(new.setup or []),
        env_keys=sorted(env),
        env_sealed=seal(services.secrets, tenant_id, template_id, env),
        default_preview_port=new.default_preview_port,
        status="building",
        size_bytes=None,
        layer_build_id=None,
        created_at=now,
        updated_at=now,
    )

    def work(tx: Transaction) -> None:
        tenants.lock(tx, tenant_id)
        if store.active_builds_of_tenant(tx, tenant_id) >= MAX_ACTIVE_BUILDS:
            raise _build_limit_reached()
        if store.name_taken(tx, template.workspace_id, template.name):
            raise conflict("TEMPLATE_NAME_TAKEN", "template name already used in the workspace")
        store.insert_template(tx, template)

    await services.db.transaction(work)
    build = await start_build(services, template, owner_user_id)
    return template, build


async def start_build(services: TemplateServices, template: TemplateRecord, owner_user_id: str | None) -> BuildRecord:
    """A new build of `template`, queued then booted (409 BUILD_IN_PROGRESS while one runs)."""
    now = utc_now_iso()
    build_id = new_uuid()
    draft = BuildRecord(
        id=build_id, template_id=template.id, tenant_id=template.tenant_id, workspace_id=template.workspace_id,
        project_id=None, external_workspace_id=None, external_user_id=None, external_project_id=None,
        owner_user_id=owner_user_id, base=template.base, size=BUILD_SIZE, slug=f"build-{build_id[:8]}", status="queued",
        error=None, size_bytes=None, started_at=None, finished_at=None, last_activity_at=now, created_at=now, updated_at=now,
        node=services.settings.node_name,
    )

    def check_and_insert(tx: Transaction) -> None:
        """The caps and the row in one transaction, the tenant's row locked (on
        PostgreSQL), so that builds started at once on any nodes never pass them."""
        tenants.lock(tx, template.tenant_id)
        if store.build_active(tx, template.id):
            raise conflict("BUILD_IN_PROGRESS", "a build of this template is already queued or building")
        if store.active_builds_of_tenant(tx, template.tenant_id) >= MAX_ACTIVE_BUILDS:
            raise _build_limit_reached()
        store.insert_build(tx, draft)

    await claims.bind(services.db, build_id)  # placement's claim: from its row on, the row counts
    await services.db.transaction(check_and_insert)
    if template.layer_build_id is None and template.status != "building":
        await store.update_template(services.db, template.id, {"status": "building", "updated_at": now})
    ref = await services.system.create(BuildActor, build_id, draft)
    await ref.ask(Boot())
    record: BuildRecord = await ref.ask(Get())
    return record


async def rebuild(services: TemplateServices, template: TemplateRecord, owner_user_id: str | None) -> BuildRecord:
    return await start_build(services, template, owner_user_id)


async def find_build(services: TemplateServices, tenant_id: str, build_id: str, *, key_workspace_id: str | None = None) -> BuildRecord:
    if not is_uuid(build_id):
        raise build_not_found()
    build = await store.find_build(services.db, tenant_id, build_id.lower())
    if build is None or (key_workspace_id is not None and build.workspace_id != key_workspace_id):
        raise build_not_found()
    return build


async def cancel_build(services: TemplateServices, build: BuildRecord) -> BuildRecord:
    ref = await services.system.get(BuildActor, build.id)
    record: BuildRecord = await ref.ask(Cancel(), timeout=120)
    return record


async def retry_build(services: TemplateServices, build: BuildRecord, owner_user_id: str | None) -> BuildRecord:
    if build.status not in ("failed", "cancelled"):
        raise conflict("BUILD_NOT_RETRYABLE", "only a failed or cancelled build can be retried")
    template = await store.load_template(services.db, build.template_id)
    if template is None:
        raise template_not_found(build.template_id)
    return await start_build(services, template, owner_user_id)


async def delete_template(services: TemplateServices, template: TemplateRecord) -> None:
    """Cancel a running build, remove the row, and the files unless sandboxes use them."""
    active = await store.latest_build(services.db, template.id)
    if active is not None and active.status in store.ACTIVE:
        try:
            await cancel_build(services, active)
        except ApiError as exc:
            if exc.code != "BUILD_ALREADY_TERMINAL":
                raise
    await services.db.transaction(lambda tx: store.delete_template(tx, template.id))
    services.notices.tell_others(cleanup.TEMPLATE_DELETED, template.id)  # every node holding its files removes them
    await cleanup.remove_files_if_unused(services, template.id)


async def build_logs(services: TemplateServices, build: BuildRecord) -> list[LogLine]:
    return await store.log_lines(services.db, build.id)


@dataclass(frozen=True)
class StatusChange:
    status: str


async def follow_build(services: TemplateServices, build: BuildRecord, after: int = 0) -> AsyncIterator[list[LogLine] | StatusChange]:
    """Log lines after `after` as they are written, and each status the build takes (its
    current one first); ends after a terminal status, once its last lines are out."""
    status: str | None = None
    while True:
        current = await store.find_build(services.db, build.tenant_id, build.id)
        lines = await store.log_lines(services.db, build.id, after)
        if lines:
            after = lines[-1].seq
            yield lines
        if current is None:
            return
        if current.status != status:
            status = current.status
            if status in store.TERMINAL:
                rest = await store.log_lines(services.db, build.id, after)
                if rest:
                    yield rest
            yield StatusChange(status)
            if status in store.TERMINAL:
                return
        if not lines:
            yield []
        await trio.sleep(FOLLOW_POLL)


async def recover_interrupted(services: TemplateServices) -> int:
    """At start-up: builds a stop cut off are failed (their instances removed); retry them."""
    interrupted = await store.unfinished_builds(services.db, services.settings.node_name)
    for build in interrupted:
        ref = await services.system.get(BuildActor, build.id)
        if build.status == "queued":
            await ref.ask(Boot())
        else:
            await ref.tell(Booted(None, "the control plane stopped during the build; retry it"))
    return len(interrupted)
