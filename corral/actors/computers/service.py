"""Computer operations the HTTP layer calls: create, list, find, update, lifecycle, clone,
resize, move, delete, auto-stop. Each state change goes through the computer's actor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from corral.actors.nodes import claims, moves, placement
from corral.actors.ref import ActorRef
from corral.actors.tenancy import Attribution, Placement, resolve_attribution
from corral.actors.tenancy import store as tenancy_store
from corral.actors.tenancy.scopes import role_at_least
from corral.actors.tenancy.workspaces import effective_role
from corral.errors import ApiError, forbidden, validation_error
from corral.ids import new_uuid
from corral.models import Rule, model
from corral.storage import utc_now_iso

from . import billing_hooks, store
from .actor import ComputerActor, computer_not_found
from .env import copy_env, set_env
from .messages import (
    Boot,
    Booted,
    Clone,
    Destroy,
    Get,
    Move,
    Pause,
    Resize,
    Restart,
    Start,
    Stop,
    Update,
)
from .profiles import ProfileRequest, default_profile, explicit_profile
from .records import RESOLUTION, RESOLUTION_PROBLEM, SIZE_NAMES
from .snapshots import source_snapshot, still_ready
from .store import ComputerDraft, ComputerRecord
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
    template_type: Annotated[str, Rule(description="one of GET /computer-templates", schema={"enum": template_types()})]
    size: Literal[SIZE_NAMES] = "small"  # type: ignore[valid-type]
    selected_apps: Annotated[list[str] | None, Rule(message="must be an array of app names")] = None
    resolution: Annotated[
        str | None, Rule(pattern=RESOLUTION, message=RESOLUTION_PROBLEM, description="the desktop's size, WIDTHxHEIGHT (default 1280x800)")
    ] = None
    snapshot_id: Annotated[
        str | None, Rule(format="uuid", description="a ready snapshot of the tenant's: the new computer starts with its files")
    ] = None
    region: Annotated[
        str | None, Rule(description="one of CORRAL_REGIONS: placed on a node of that region (default: the node that places it)")
    ] = None

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


async def _create(platform: ComputerServices, draft: ComputerDraft) -> ActorRef[ComputerActor]:
    """The new computer's actor, which writes its row (and `computer.created`)."""
    computer_id = new_uuid()
    await claims.bind(platform.db, computer_id)  # placement's claim: from its row on, the row counts
    return await platform.system.create(ComputerActor, computer_id, draft)


async def create_computer(
    platform: ComputerServices, tenant_id: str, owner_user_id: str | None, new: NewComputer, *, key_workspace_id: str | None = None
) -> ComputerRecord:
    """Check the template, the snapshot, the profile and the credits, attribute, insert
    `provisioning`, boot (from the snapshot's files when there is one)."""
    check_template(new)
    region = placement.region_of(platform.settings.regions, platform.settings.node_region, new.region)
    snapshot = None
    if new.snapshot_id is not None:
        snapshot = await source_snapshot(
            platform.db, tenant_id, new.snapshot_id.lower(), new.template_type, key_workspace_id=key_workspace_id
        )
    profile = await explicit_profile(platform, tenant_id, new)
    await billing_hooks.require_allowance(platform, None, new.size, tenant_id=tenant_id, external_user_id=new.external_user_id)
    attribution = await resolve_attribution(platform.db, tenant_id, new, owner_user_id, key_workspace_id=key_workspace_id)
    profile = profile or await default_profile(platform, tenant_id, attribution.workspace_id, new)
    template = get_template(new.template_type)
    assert template is not None
    draft = ComputerDraft(
        attribution=attribution,
        owner_user_id=owner_user_id,
        name=new.name,
        template_type=new.template_type,
        size=new.size,
        region=region,
        selected_apps=new.apps,
        resolution=new.resolution or template.resolution,
        agent_runtime_profile_id=profile.id if profile else None,
        from_snapshot_id=snapshot.id if snapshot else None,
    )
    ref = await _create(platform, draft)
    record: ComputerRecord = await ref.ask(Get())
    if profile is not None and profile.env:
        await set_env(platform, record, profile.env)
    if profile is not None and platform.agent_runtime_profiles is not None:
        await platform.agent_runtime_profiles.applied(platform, tenant_id, profile.id, record.id)
    await ref.ask(Boot(snapshot_source=draft.from_snapshot_id))
    return record


async def clone_computer(platform: ComputerServices, owner_user_id: str | None, source: ComputerRecord) -> ComputerRecord:
    """A new computer with its own id and a copy of the running source's files, apps and env."""
    ref = await platform.system.get(ComputerActor, source.id)
    source_instance: str = await ref.ask(Clone(), timeout=ASK_TIMEOUT)
    await billing_hooks.require_allowance(
        platform, None, source.size, tenant_id=source.tenant_id, external_user_id=source.external_user_id
    )
    draft = ComputerDraft(
        attribution=Attribution.of(source),
        owner_user_id=owner_user_id,
        name=f"{source.name} (clone)"[:MAX_NAME],
        template_type=source.template_type,
        size=source.size,
        region=source.region,
        selected_apps=source.selected_apps,
        resolution=source.resolution,
        agent_runtime_profile_id=source.agent_runtime_profile_id,
        settings=source.settings,
        ai_config=source.ai_config,
        auto_stop=source.auto_stop,
        cloned_from=source.id,
    )
    clone_ref = await _create(platform, draft)
    record: ComputerRecord = await clone_ref.ask(Get())
    await copy_env(platform, source, record)
    await clone_ref.ask(Boot(source_instance))
    return record


async def find_computer(
    platform: ComputerServices, tenant_id: str, computer_id: str, *, key_workspace_id: str | None = None
) -> ComputerRecord:
    record = await store.find(platform.db, tenant_id, computer_id)
    if record is None or (key_workspace_id is not None and record.workspace_id != key_workspace_id):
        raise computer_not_found()
    return record


async def list_computers(
    platform: ComputerServices, tenant_id: str, filters: dict[str, str], *, key_workspace_id: str | None = None
) -> list[ComputerRecord]:
    chosen = {column: value for column, value in filters.items() if column in FILTERS}
    return await store.list_for_tenant(platform.db, tenant_id, chosen, within_workspace=key_workspace_id)


async def require_member(platform: ComputerServices, row: ComputerRecord, user_id: str | None, tenant_role: str | None) -> None:
    """Changing a computer needs its owner, or a member (not a viewer) of its workspace;
    tenant owners and admins (and keys without a user) act as admins everywhere."""
    if user_id is not None and user_id == row.owner_user_id:
        return
    workspace = await tenancy_store.workspaces.load(platform.db, row.workspace_id)
    role = await effective_role(platform.db, workspace, user_id, tenant_role) if workspace else None
    if not role_at_least(role, "member"):
        raise forbidden("not a member of this computer")


async def ask(platform: ComputerServices, computer_id: str, message: Any, timeout: float = ASK_TIMEOUT) -> ComputerRecord:
    ref = await platform.system.get(ComputerActor, computer_id)
    record: ComputerRecord = await ref.ask(message, timeout=timeout)
    return record


async def start_computer(platform: ComputerServices, row: ComputerRecord) -> ComputerRecord:
    return await ask(platform, row.id, Start())


async def stop_computer(platform: ComputerServices, row: ComputerRecord) -> ComputerRecord:
    return await ask(platform, row.id, Stop())


async def pause_computer(platform: ComputerServices, row: ComputerRecord) -> ComputerRecord:
    return await ask(platform, row.id, Pause())


async def restart_computer(platform: ComputerServices, row: ComputerRecord) -> ComputerRecord:
    return await ask(platform, row.id, Restart())


async def delete_computer(platform: ComputerServices, row: ComputerRecord) -> dict[str, Any]:
    ref = await platform.system.get(ComputerActor, row.id)
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


async def resize_computer(platform: ComputerServices, row: ComputerRecord, request: ResizeRequest) -> ComputerRecord:
    return await ask(platform, row.id, Resize(request.size))


async def move_computer(platform: ComputerServices, row: ComputerRecord, request: MoveTo) -> ComputerRecord:
    offered = regions(platform)
    if request.region not in offered:
        raise validation_error({"region": f"unknown region; one of {', '.join(offered)}"})
    return await ask(platform, row.id, Move(request.region), timeout=moves.MOVE_TIMEOUT)  # its files may go to another node


def refuse_fixed_fields(body: dict[str, Any]) -> None:
    """PATCH names only `agent_session_id`: every other field of the record is fixed."""
    refused = {name: "cannot be changed; only agent_session_id can" for name in NOT_UPDATABLE if name in body}
    if refused:
        raise validation_error(refused)


async def update_computer(platform: ComputerServices, row: ComputerRecord, request: UpdateComputer) -> ComputerRecord:
    """PATCH: `agent_session_id`, a string or null to clear."""
    return await ask(platform, row.id, Update({"agent_session_id": request.agent_session_id}))


def auto_stop_public(row: ComputerRecord) -> dict[str, Any]:
    seconds = int(row.auto_stop or 0)
    return {"auto_stop_seconds": seconds, "enabled": seconds > 0}


async def set_auto_stop(platform: ComputerServices, row: ComputerRecord, request: AutoStop) -> ComputerRecord:
    """`auto_stop_seconds`: a whole number of seconds of inactivity; 0 or null disables.

    Setting it counts as activity, so the idle clock starts from now."""
    value = request.auto_stop_seconds or 0
    return await ask(platform, row.id, Update({"auto_stop": value, "last_activity_at": utc_now_iso()}))


async def recover_provisioning(platform: ComputerServices) -> int:
    """At start-up: provision again what a restart cut short (a clone, or a computer
    made from a snapshot, copies again)."""
    interrupted = await store.being_provisioned(platform.db, platform.settings.node_name)
    for record in interrupted:
        source = await store.load(platform.db, record.cloned_from) if record.cloned_from else None
        ref = await platform.system.get(ComputerActor, record.id)
        if record.cloned_from and source is None:
            await ref.ask(Booted(None, "the clone's source was deleted before the copy was made"))
        elif record.from_snapshot_id:
            if await still_ready(platform.db, record.from_snapshot_id):
                await ref.ask(Boot(snapshot_source=record.from_snapshot_id))
            else:
                await ref.ask(Booted(None, "the snapshot was deleted before its files were copied"))
        else:
            await ref.ask(Boot(source.instance_id if source else None))
    return len(interrupted)
