"""Computer operations the HTTP layer calls: create, list, find, update, lifecycle, clone,
resize, move, delete, auto-stop. Each state change goes through the computer's actor."""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

from corral.actors.tenancy import Placement, resolve_attribution
from corral.actors.tenancy.scopes import role_at_least
from corral.actors.tenancy.slugs import slugify
from corral.actors.tenancy.workspaces import effective_role
from corral.errors import ApiError, forbidden, validation_error
from corral.ids import new_uuid
from corral.models import Rule, model
from corral.storage import Event, Row, Transaction, utc_now_iso

from . import billing_hooks
from .actor import ComputerActor, computer_not_found
from .env import copy_env, set_env
from .messages import Boot, Booted, Clone, Destroy, Move, Resize, Restart, Start, Stop, Update
from .profiles import ProfileRequest, default_profile, explicit_profile
from .records import SIZE_NAMES
from .templates import get_template, template_types

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

FILTERS = ("workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id")
MAX_NAME = 100
MAX_AUTO_STOP = 30 * 24 * 3600
ASK_TIMEOUT = 120.0
UPDATABLE = ("agent_session_id",)
NOT_UPDATABLE = (
    "id", "tenant_id", "owner_user_id", "name", "slug", "template_type", "size", "vcpus", "memory_mb", "status",
    "vm_id", "workspace_id", "project_id", "external_workspace_id", "external_user_id", "external_project_id",
    "sandbox_url", "desktop_url", "selected_apps", "settings", "ai_config", "agent_status", "resolution",
    "auto_stop", "region", "created_at", "updated_at",
)


def regions(platform: ComputerServices) -> list[str]:
    """The region slugs this deployment offers; the first is where new computers go."""
    names = [name.strip() for name in platform.settings.regions.split(",") if name.strip()]
    return names or ["local"]


def _missing_name_or_template(names: list[str]) -> ApiError:
    """The specification's one message for either field; `details` says which."""
    return ApiError(400, "MISSING_PARAM", "name is required", details={name: "is required" for name in names})


@model(missing=_missing_name_or_template)
class NewComputer(Placement, ProfileRequest):
    """A new computer of a template, with apps from its catalog."""

    name: Annotated[str, Rule(max_length=MAX_NAME, message=f"must be a non-empty string of at most {MAX_NAME} characters")]
    template_type: Annotated[str, Rule(description="one of GET /computer-templates")]
    size: Literal[SIZE_NAMES] = "small"  # type: ignore[valid-type]
    selected_apps: Annotated[list[str] | None, Rule(message="must be an array of app names")] = None

    @property
    def apps(self) -> list[str]:
        return list(dict.fromkeys(self.selected_apps or ()))


def check_template(new: NewComputer) -> None:
    """`400 INVALID_TEMPLATE` for an unknown template, 422 for apps not in its catalog."""
    template = get_template(new.template_type)
    if template is None:
        raise ApiError(400, "INVALID_TEMPLATE", f"unknown template_type {new.template_type!r}; one of {', '.join(template_types())}")
    unknown = [app for app in new.apps if app not in template.catalog]
    if unknown:
        raise validation_error(
            {"selected_apps": f"unknown app(s) {', '.join(unknown)}; available: {', '.join(sorted(template.catalog))}"}
        )


def _unique_slug(tx: Transaction, base: str) -> str:
    """A DNS label unique among computers and sandboxes (both name preview hosts)."""
    while True:
        candidate = f"{base[:54].strip('-') or 'computer'}-{secrets.token_hex(4)}"
        taken = tx.fetch_one("SELECT 1 FROM computers WHERE slug = ?", (candidate,)) or tx.fetch_one(
            "SELECT 1 FROM sandboxes WHERE slug = ?", (candidate,)
        )
        if not taken:
            return candidate


async def _insert(platform: ComputerServices, values: Row) -> Row:
    def work(tx: Transaction) -> Row:
        now = utc_now_iso()
        row: Row = {
            "id": new_uuid(),
            # Random from the first character: host veths and firewall chains are named
            # after the id's first 12 characters (corral.net).
            "instance_id": f"vm-{uuid.uuid4().hex}",
            "slug": _unique_slug(tx, slugify(values["name"], "computer")),
            "status": "provisioning",
            "vm_id": None,
            "agent_session_id": None,
            "agent_status": None,
            "error": None,
            "cloned_from": None,
            "last_activity_at": now,
            "created_at": now,
            "updated_at": now,
            **values,
        }
        tx.insert("computers", row)
        return row

    return await platform.db.transaction(work)


async def _announce_and_boot(platform: ComputerServices, row: Row, clone_source: str | None = None) -> Row:
    data = {"computer_id": row["id"], "name": row["name"], "size": row["size"], "template_type": row["template_type"]}
    await platform.bus.publish(Event("computer.created", "computer", row["id"], data, tenant_id=row["tenant_id"]))
    ref = await platform.system.get(ComputerActor, row["id"])
    await ref.ask(Boot(clone_source))
    return row


async def create_computer(
    platform: ComputerServices, tenant_id: str, owner_user_id: str | None, new: NewComputer, *, key_workspace_id: str | None = None
) -> Row:
    """Check the template, the profile and the credits, attribute, insert `provisioning`, boot."""
    check_template(new)
    profile = await explicit_profile(platform, tenant_id, new)
    await billing_hooks.require_allowance(platform, None, new.size, tenant_id=tenant_id, external_user_id=new.external_user_id)
    if key_workspace_id is not None:
        new = _within_key_workspace(new, key_workspace_id)
    attribution = await resolve_attribution(platform.db, tenant_id, new, owner_user_id)
    profile = profile or await default_profile(platform, tenant_id, attribution.workspace_id, new)
    template = get_template(new.template_type)
    assert template is not None
    row = await _insert(
        platform,
        {
            "tenant_id": tenant_id,
            "owner_user_id": owner_user_id,
            "name": new.name,
            "template_type": new.template_type,
            "size": new.size,
            "region": regions(platform)[0],
            "workspace_id": attribution.workspace_id,
            "project_id": attribution.project_id,
            "external_workspace_id": attribution.external_workspace_id,
            "external_user_id": attribution.external_user_id,
            "external_project_id": attribution.external_project_id,
            "selected_apps": json.dumps(new.apps),
            "settings": json.dumps({}),
            "ai_config": json.dumps({}),
            "agent_runtime_profile_id": profile.id if profile else None,
            "resolution": template.resolution,
            "auto_stop": 0,
        },
    )
    if profile is not None and profile.env:
        await set_env(platform, row, profile.env)
    return await _announce_and_boot(platform, row)


def _within_key_workspace(new: NewComputer, key_workspace_id: str) -> NewComputer:
    """A key restricted to one workspace creates there: naming another is 403, checked
    before attribution so that nothing is created on the way."""
    named = new.workspace_id
    if (named is not None and named != key_workspace_id) or new.workspace_slug or new.workspace_name:
        raise forbidden("this key is restricted to one workspace; give its workspace_id or none")
    return dataclasses.replace(new, workspace_id=key_workspace_id)


async def clone_computer(platform: ComputerServices, owner_user_id: str | None, source: Row) -> Row:
    """A new computer with its own id and a copy of the running source's files, apps and env."""
    ref = await platform.system.get(ComputerActor, source["id"])
    source_instance: str = await ref.ask(Clone(), timeout=ASK_TIMEOUT)
    await billing_hooks.require_allowance(
        platform, None, source["size"], tenant_id=source["tenant_id"], external_user_id=source["external_user_id"]
    )
    copied = (
        "tenant_id", "template_type", "size", "region", "workspace_id", "project_id", "external_workspace_id",
        "external_user_id", "external_project_id", "selected_apps", "settings", "ai_config",
        "agent_runtime_profile_id", "resolution", "auto_stop",
    )
    values = {name: source[name] for name in copied}
    values.update(owner_user_id=owner_user_id, name=f"{source['name']} (clone)"[:MAX_NAME])
    row = await _insert(platform, values)
    await platform.db.execute("UPDATE computers SET cloned_from = ? WHERE id = ?", (source["id"], row["id"]))
    row["cloned_from"] = source["id"]
    await copy_env(platform, source, row)
    return await _announce_and_boot(platform, row, clone_source=source_instance)


async def find_computer(platform: ComputerServices, tenant_id: str, computer_id: str, *, key_workspace_id: str | None = None) -> Row:
    row = await platform.db.fetch_one("SELECT * FROM computers WHERE id = ? AND tenant_id = ?", (computer_id, tenant_id))
    if row is None or (key_workspace_id is not None and row["workspace_id"] != key_workspace_id):
        raise computer_not_found()
    return row


async def list_computers(
    platform: ComputerServices, tenant_id: str, filters: dict[str, str], *, key_workspace_id: str | None = None
) -> list[Row]:
    clauses, params = ["tenant_id = ?"], [tenant_id]
    if key_workspace_id is not None:
        clauses.append("workspace_id = ?")
        params.append(key_workspace_id)
    for column, value in filters.items():
        if column in FILTERS:
            clauses.append(f"{column} = ?")
            params.append(value)
    return await platform.db.fetch_all(
        f"SELECT * FROM computers WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, id", tuple(params)
    )


async def require_member(platform: ComputerServices, row: Row, user_id: str | None, tenant_role: str | None) -> None:
    """Changing a computer needs its owner, or a member (not a viewer) of its workspace;
    tenant owners and admins (and keys without a user) act as admins everywhere."""
    if user_id is not None and user_id == row["owner_user_id"]:
        return
    workspace = await platform.db.fetch_one("SELECT * FROM workspaces WHERE id = ?", (row["workspace_id"],))
    role = await effective_role(platform.db, workspace, user_id, tenant_role) if workspace else None
    if not role_at_least(role, "member"):
        raise forbidden("not a member of this computer")


async def ask(platform: ComputerServices, computer_id: str, message: Any) -> Row:
    ref = await platform.system.get(ComputerActor, computer_id)
    row: Row = await ref.ask(message, timeout=ASK_TIMEOUT)
    return row


async def start_computer(platform: ComputerServices, row: Row) -> Row:
    return await ask(platform, row["id"], Start())


async def stop_computer(platform: ComputerServices, row: Row) -> Row:
    return await ask(platform, row["id"], Stop())


async def restart_computer(platform: ComputerServices, row: Row) -> Row:
    return await ask(platform, row["id"], Restart())


async def delete_computer(platform: ComputerServices, row: Row) -> dict[str, Any]:
    ref = await platform.system.get(ComputerActor, row["id"])
    result: dict[str, Any] = await ref.ask(Destroy(), timeout=ASK_TIMEOUT)
    return result


@model
class ResizeRequest:
    size: Literal[SIZE_NAMES]  # type: ignore[valid-type]


@model
class MoveTo:
    region: Annotated[str, Rule(description="one of the regions GET /regions lists")]


@model
class UpdateComputer:
    """Only `agent_session_id` may change; naming another field is 422."""

    agent_session_id: Annotated[str | None, Rule(max_length=255, message="must be a string of at most 255 characters, or null")]


@model
class AutoStop:
    auto_stop_seconds: Annotated[
        int | None,
        Rule(minimum=0, maximum=MAX_AUTO_STOP, message=f"must be an integer from 0 (disabled) to {MAX_AUTO_STOP}, or null",
             description="seconds of inactivity; 0 or null disables"),
    ]


async def resize_computer(platform: ComputerServices, row: Row, request: ResizeRequest) -> Row:
    return await ask(platform, row["id"], Resize(request.size))


async def move_computer(platform: ComputerServices, row: Row, request: MoveTo) -> Row:
    offered = regions(platform)
    if request.region not in offered:
        raise validation_error({"region": f"unknown region; one of {', '.join(offered)}"})
    return await ask(platform, row["id"], Move(request.region))


def refuse_fixed_fields(body: dict[str, Any]) -> None:
    """PATCH names only `agent_session_id`: every other field of the record is fixed."""
    refused = {name: "cannot be changed; only agent_session_id can" for name in NOT_UPDATABLE if name in body}
    if refused:
        raise validation_error(refused)


async def update_computer(platform: ComputerServices, row: Row, request: UpdateComputer) -> Row:
    """PATCH: `agent_session_id`, a string or null to clear."""
    return await ask(platform, row["id"], Update({"agent_session_id": request.agent_session_id}))


def auto_stop_public(row: Row) -> dict[str, Any]:
    seconds = int(row["auto_stop"] or 0)
    return {"auto_stop_seconds": seconds, "enabled": seconds > 0}


async def set_auto_stop(platform: ComputerServices, row: Row, request: AutoStop) -> Row:
    """`auto_stop_seconds`: a whole number of seconds of inactivity; 0 or null disables.

    Setting it counts as activity, so the idle clock starts from now."""
    value = request.auto_stop_seconds or 0
    return await ask(platform, row["id"], Update({"auto_stop": value, "last_activity_at": utc_now_iso()}))


async def recover_provisioning(platform: ComputerServices) -> int:
    """At start-up: provision again what a restart cut short (a clone copies again)."""
    rows = await platform.db.fetch_all("SELECT * FROM computers WHERE status = 'provisioning'")
    for row in rows:
        source = None
        if row["cloned_from"]:
            source = await platform.db.fetch_value("SELECT instance_id FROM computers WHERE id = ?", (row["cloned_from"],))
        ref = await platform.system.get(ComputerActor, row["id"])
        if row["cloned_from"] and not source:
            await ref.ask(Booted(None, "the clone's source was deleted before the copy was made"))
        else:
            await ref.ask(Boot(str(source) if source else None))
    return len(rows)
